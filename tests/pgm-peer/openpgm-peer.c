/*
 * openpgm-peer: a small test peer built on OpenPGM (Debian libpgm 5.3) so that
 * wirespeed's PGM transport can be checked against the reference implementation.
 * Our own code; the OpenPGM examples were only read to learn the API.
 *
 * Subcommands: send, recv, reflect, ping (see usage() and README.md).
 *
 * OpenPGM options set, and why
 * ----------------------------
 * pgm_socket(AF_INET, SOCK_SEQPACKET, IPPROTO_UDP)
 *     PGM encapsulated in UDP (RFC 3208 appendix / OpenPGM "UDP encapsulation"), as
 *     ZeroMQ epgm does: no raw sockets, wirespeed can capture it as plain UDP.
 * PGM_UDP_ENCAP_UCAST_PORT = PGM_UDP_ENCAP_MCAST_PORT = --port
 *     OpenPGM binds its receive socket only to the MCAST port, but receivers send NAKs
 *     unicast to the UCAST port; the two must be equal or NAKs never reach the source.
 * PGM_IP_ROUTER_ALERT = 0
 *     no RFC 2113 router alert option; pointless for UDP and on one link.
 * PGM_SEND_ONLY / PGM_RECV_ONLY
 *     each socket is one direction, so a source does not create receiver state and a
 *     receiver does not create a transmit window.
 * PGM_PASSIVE = 0 (receivers)
 *     receivers do send NAKs (a passive receiver never asks for repairs).
 * PGM_MTU = --mtu (default 9000, OpenPGM accepts up to 65535)
 *     max TSDU is MTU - 52 (IP 20, UDP 8, PGM header 16, data header 8), so with 9000 an
 *     8800-byte message is one ODATA packet; bigger messages fragment (OPT_FRAGMENT).
 *     The link MTU must be at least this (selftest.sh sets the veth MTU to 9000).
 * PGM_TXW_SQNS = --txw-sqns (default 32768) / PGM_RXW_SQNS = --rxw-sqns (default 32768)
 *     windows in sequence numbers, big enough that no repair request falls outside
 *     the source's window during a 20,000-message test (so loss is always repairable).
 * PGM_TXW_MAX_RTE = 1,000,000,000 bytes/s
 *     OpenPGM's rate limiter; set so high it never limits: pacing is done by this
 *     program (--rate), 0 meaning as fast as pgm_send returns.
 * PGM_AMBIENT_SPM = --spm-ambient-ms (default 200 ms)
 *     periodic SPMs so a receiver always learns the source NLA (needed to NAK) and the
 *     window edges within a fraction of a second, cheap on a LAN.
 * PGM_HEARTBEAT_SPM = {2,2,5,10,25,50,100,250,500,1000} ms
 *     after the last ODATA, SPMs carrying the lead come quickly, so receivers notice a
 *     lost tail of a burst within a few ms; the schedule restarts after each ODATA.
 * PGM_PEER_EXPIRY = 300 s, PGM_SPMR_EXPIRY = 250 ms
 *     keep a silent source for the whole test; ask for an SPM (SPMR) 250 ms after data
 *     from a source whose SPM was not seen.
 * PGM_NAK_BO_IVL = --nak-bo-ms (5), PGM_NAK_RPT_IVL = --nak-rpt-ms (50),
 * PGM_NAK_RDATA_IVL = --nak-rdata-ms (50), PGM_NAK_DATA_RETRIES = PGM_NAK_NCF_RETRIES =
 * --nak-retries (20)
 *     LAN values: NAK 0..5 ms after a gap is seen, repeat after 50 ms without NCF or
 *     RDATA, give up (unrecoverable loss, PGM_IO_STATUS_RESET) after 20 tries (~1 s).
 * PGM_MULTICAST_LOOP = 0, PGM_MULTICAST_HOPS = 1
 *     no loopback of our own packets; multicast never leaves the link.
 * PGM_NOBLOCK = 1
 *     one thread per process drives everything through poll(); OpenPGM has no timer
 *     thread, timers (SPMs, NAK back-off, RDATA) run only inside pgm_send/pgm_recv, so a
 *     source must keep calling pgm_recv to answer NAKs; we do that between sends.
 * SO_RCVBUF/SO_SNDBUF via SO_RCVBUFFORCE/SO_SNDBUFFORCE on OpenPGM's own fds
 *     (PGM_RECV_SOCK, PGM_SEND_SOCK) when root, else SO_RCVBUF through pgm_setsockopt:
 *     a burst of 8800-byte messages must not overflow the default socket buffer.
 * pgm_sockaddr_t: sa_port = --dport (data-destination port, default 7500), sport 0
 *     (random); GSI from a string of hostname, pid and role so that two processes on
 *     one host (same hostname in two network namespaces) never share a GSI.
 *
 * Counters: OpenPGM 5.3's public API exposes none of its statistics (the
 * cumulative_stats array lives in the opaque pgm_sock_t and is only reachable via its
 * SNMP/HTTP modules, not shipped by Debian). So, with --wire-stats (default on when
 * root), this program counts PGM packets on the wire itself with an AF_PACKET socket
 * filtered (classic BPF) to UDP port --port and PGM types other than ODATA, split by
 * direction. These are observed packets: "wire_drops" reports what the capture socket
 * itself dropped (then counts are lower bounds).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>

#include <pgm/pgm.h>

#define PGM_TYPE_SPM 0x00
#define PGM_TYPE_ODATA 0x04
#define PGM_TYPE_RDATA 0x05
#define PGM_TYPE_NAK 0x08
#define PGM_TYPE_NCF 0x0a
#define PGM_TYPE_SPMR 0x0c

#define MAX_MSG 65536

/* ------------------------------------------------------------------ options */

struct opts {
	const char *network;
	int port;
	int reply_port;
	int dport;
	long long count;
	int size;
	double rate;
	int txw_sqns;
	int rxw_sqns;
	int linger_ms;
	int timeout_ms;
	int wait_ms;
	int mtu;
	int nak_bo_ms;
	int nak_rpt_ms;
	int nak_rdata_ms;
	int nak_retries;
	int spm_ambient_ms;
	int wire_stats; /* -1 auto, 0 off, 1 on */
	const char *rtt_out;
	int format;     /* FMT_PEER or FMT_WS_COUNTER */
	int expect_end; /* recv: wait for wirespeed's end-of-stream message after --count */
};

/* Payload formats (send --format, recv --format). */
#define FMT_PEER 0       /* counter k (64-bit BE) in bytes 0..8, pattern_byte(k, i) after */
#define FMT_WS_COUNTER 1 /* wirespeed's `counter` format: every 64-bit BE word w of message k
			  * holds k * words + w (words = size / 8) */

static const char *g_prog = "openpgm-peer";
static volatile sig_atomic_t g_stop = 0;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", g_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: %s SUBCOMMAND --network \"IFACE_OR_ADDR;GROUP\" --port P [options]\n"
		"  send    --count N --size S [--rate PPS] [--txw-sqns N] [--linger-ms MS]\n"
		"          [--format peer|wirespeed-counter]\n"
		"  recv    --count N [--timeout-ms MS] [--rxw-sqns N]\n"
		"          [--format peer|wirespeed-counter [--expect-end]]\n"
		"  reflect --reply-port Q            (until SIGTERM/SIGINT)\n"
		"  ping    --reply-port Q --rate PPS --count N --size S [--wait-ms MS] [--rtt-out FILE]\n"
		"common: [--dport 7500] [--mtu 9000] [--nak-bo-ms 5] [--nak-rpt-ms 50]\n"
		"        [--nak-rdata-ms 50] [--nak-retries 20] [--spm-ambient-ms 200]\n"
		"        [--wire-stats | --no-wire-stats]\n",
		g_prog);
}

static long long parse_int(const char *name, const char *s, long long lo, long long hi)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end != '\0' || v < lo || v > hi)
		die(2, "--%s: '%s' is not an integer in %lld..%lld", name, s, lo, hi);
	return v;
}

static double parse_rate(const char *s)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end != '\0' || !(v >= 0) || v > 1e9)
		die(2, "--rate: '%s' is not a packet rate in 0..1e9", s);
	return v;
}

/* ------------------------------------------------------------------ time */

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ------------------------------------------------------------------ payload */

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

static uint64_t get_be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Pattern byte i of message k: depends on both, so a byte from another message or a
 * shifted byte is detected. */
static inline uint8_t pattern_byte(uint64_t k, size_t i)
{
	uint64_t x = k * 0x9E3779B97F4A7C15ULL + (uint64_t)i * 0x2545F4914F6CDD1DULL;
	return (uint8_t)(x >> 56);
}

static void fill_pattern(uint8_t *buf, size_t from, size_t len, uint64_t k)
{
	for (size_t i = from; i < len; i++)
		buf[i] = pattern_byte(k, i);
}

static bool check_pattern(const uint8_t *buf, size_t from, size_t len, uint64_t k)
{
	for (size_t i = from; i < len; i++)
		if (buf[i] != pattern_byte(k, i))
			return false;
	return true;
}

/* wirespeed's counter format: message k of len bytes (a multiple of 8) is len/8 big-endian
 * words of one running counter, k * words, k * words + 1, ... */
static void fill_ws_counter(uint8_t *buf, size_t len, uint64_t k)
{
	const uint64_t words = len / 8;
	for (uint64_t w = 0; w < words; w++)
		put_be64(buf + 8 * w, k * words + w);
}

/* The message number of a wirespeed counter payload, or -1 if any byte is not what
 * wirespeed's counter format puts there (every word is checked). */
static long long check_ws_counter(const uint8_t *buf, size_t len)
{
	if (len < 8 || len % 8 != 0)
		return -1;
	const uint64_t words = len / 8;
	const uint64_t w0 = get_be64(buf);
	if (w0 % words != 0 || w0 / words > (uint64_t)INT64_MAX)
		return -1;
	for (uint64_t w = 1; w < words; w++)
		if (get_be64(buf + 8 * w) != w0 + w)
			return -1;
	return (long long)(w0 / words);
}

/* wirespeed's end-of-stream message (crates/wirespeed/src/control.rs): 80 bytes,
 * little-endian: magic "WSPDEND1", stream index u32 @8, stream count u32 @12, format stream
 * u32 @16, reserved @20..24, session u64 @24, first seq u64 @32, last seq u64 @40, sent u64
 * @48, skipped u64 @56, reserved @64..72, FNV-1a of bytes 0..72 @72. */
#define WS_END_LEN 80
struct ws_end {
	bool seen;
	bool valid; /* magic, checksum and zero reserved bytes */
	uint32_t stream_index, stream_count;
	uint64_t session, first_seq, last_seq, sent, skipped;
};

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static bool is_ws_end(const uint8_t *buf, size_t len)
{
	return len == WS_END_LEN && memcmp(buf, "WSPDEND1", 8) == 0;
}

static void parse_ws_end(const uint8_t *b, struct ws_end *e)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < 72; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	bool reserved_zero = true;
	for (size_t i = 20; i < 24; i++)
		reserved_zero = reserved_zero && b[i] == 0;
	for (size_t i = 64; i < 72; i++)
		reserved_zero = reserved_zero && b[i] == 0;
	e->seen = true;
	e->valid = h == get_le64(b + 72) && reserved_zero;
	e->stream_index = (uint32_t)(get_le64(b + 8) & 0xffffffffu);
	e->stream_count = (uint32_t)(get_le64(b + 8) >> 32);
	e->session = get_le64(b + 24);
	e->first_seq = get_le64(b + 32);
	e->last_seq = get_le64(b + 40);
	e->sent = get_le64(b + 48);
	e->skipped = get_le64(b + 56);
}

/* ------------------------------------------------------------------ wire statistics */

struct wire {
	int fd;
	bool on;
	uint64_t out[256];
	uint64_t in[256];
	uint64_t drops;
};

static void wire_open(struct wire *w, int enabled, int port, unsigned ifindex)
{
	memset(w, 0, sizeof(*w));
	w->fd = -1;
	if (enabled == 0)
		return;
	/* ETH_P_ALL: only ptype_all taps see outgoing packets */
	int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
	if (fd < 0) {
		if (enabled == 1)
			die(1, "--wire-stats needs an AF_PACKET socket (root/CAP_NET_RAW): %s", strerror(errno));
		return;
	}
	/* IPv4 UDP (first fragment only) to port P whose PGM type (UDP payload byte 4) is
	 * not ODATA: SPM, NCF, RDATA, NAK, SPMR and friends. */
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_PROTOCOL)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 10),
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 8),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 6),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 6, 0),
		BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),
		BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)port, 0, 3),
		BPF_STMT(BPF_LD | BPF_B | BPF_IND, 12),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PGM_TYPE_ODATA, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, 256),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };
	if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0)
		die(1, "attaching the wire-stats filter: %s", strerror(errno));
	int rcv = 16 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	struct sockaddr_ll sll;
	memset(&sll, 0, sizeof(sll));
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = htons(ETH_P_ALL);
	sll.sll_ifindex = (int)ifindex;
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0)
		die(1, "binding the wire-stats socket: %s", strerror(errno));
	/* drain anything captured before the filter was attached */
	uint8_t tmp[512];
	while (recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT) > 0) {
	}
	w->fd = fd;
	w->on = true;
}

static void wire_drain(struct wire *w)
{
	if (w->fd < 0)
		return;
	uint8_t buf[512];
	for (;;) {
		struct sockaddr_ll from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(w->fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (n < 0)
			break;
		if (n < 20)
			continue;
		size_t ihl = (size_t)(buf[0] & 0x0f) * 4;
		if ((size_t)n < ihl + 8 + 5)
			continue;
		uint8_t type = buf[ihl + 8 + 4];
		if (from.sll_pkttype == PACKET_OUTGOING)
			w->out[type]++;
		else
			w->in[type]++;
	}
}

static void wire_close(struct wire *w)
{
	if (w->fd < 0)
		return;
	wire_drain(w);
	struct tpacket_stats st;
	socklen_t l = sizeof(st);
	if (getsockopt(w->fd, SOL_PACKET, PACKET_STATISTICS, &st, &l) == 0)
		w->drops += st.tp_drops;
	close(w->fd);
	w->fd = -1;
}

/* ------------------------------------------------------------------ PGM socket */

struct peer_sock {
	pgm_sock_t *sock;
	unsigned ifindex;
};

static void set_int(pgm_sock_t *s, int opt, int v, const char *name)
{
	if (!pgm_setsockopt(s, IPPROTO_PGM, opt, &v, sizeof(v)))
		die(1, "OpenPGM rejected %s = %d", name, v);
}

static void enlarge_buffers(pgm_sock_t *s, bool sender)
{
	int sz = 32 << 20;
	int fd = -1;
	socklen_t l = sizeof(fd);
	if (pgm_getsockopt(s, IPPROTO_PGM, PGM_RECV_SOCK, &fd, &l) && fd >= 0) {
		if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) < 0)
			(void)pgm_setsockopt(s, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	if (sender) {
		l = sizeof(fd);
		if (pgm_getsockopt(s, IPPROTO_PGM, PGM_SEND_SOCK, &fd, &l) && fd >= 0) {
			if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
				(void)pgm_setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		}
	}
}

static void open_pgm(struct peer_sock *ps, const struct opts *o, int udp_port, bool sender, const char *role)
{
	pgm_error_t *err = NULL;
	struct pgm_addrinfo_t *res = NULL;
	if (!pgm_getaddrinfo(o->network, NULL, &res, &err))
		die(2, "--network '%s': %s (expected \"IFACE_OR_ADDR;GROUP\", e.g. \"198.18.99.1;239.192.0.1\")",
		    o->network, err && err->message ? err->message : "invalid");
	if (res->ai_send_addrs_len < 1 || res->ai_recv_addrs_len < 1)
		die(2, "--network '%s': no send/receive group", o->network);
	const sa_family_t family = res->ai_send_addrs[0].gsr_group.ss_family;
	if (family != AF_INET)
		die(2, "--network '%s': only IPv4 groups are supported by this peer", o->network);

	pgm_sock_t *s = NULL;
	if (!pgm_socket(&s, family, SOCK_SEQPACKET, IPPROTO_UDP, &err))
		die(1, "creating a PGM/UDP socket: %s", err && err->message ? err->message : "failed");

	set_int(s, PGM_UDP_ENCAP_UCAST_PORT, udp_port, "PGM_UDP_ENCAP_UCAST_PORT");
	set_int(s, PGM_UDP_ENCAP_MCAST_PORT, udp_port, "PGM_UDP_ENCAP_MCAST_PORT");
	set_int(s, PGM_IP_ROUTER_ALERT, 0, "PGM_IP_ROUTER_ALERT");
	set_int(s, PGM_MTU, o->mtu, "PGM_MTU");
	if (sender) {
		set_int(s, PGM_SEND_ONLY, 1, "PGM_SEND_ONLY");
		set_int(s, PGM_TXW_SQNS, o->txw_sqns, "PGM_TXW_SQNS");
		set_int(s, PGM_TXW_MAX_RTE, 1000 * 1000 * 1000, "PGM_TXW_MAX_RTE");
		set_int(s, PGM_AMBIENT_SPM, (int)pgm_msecs(o->spm_ambient_ms), "PGM_AMBIENT_SPM");
		const int hb[] = {
			(int)pgm_msecs(2), (int)pgm_msecs(2), (int)pgm_msecs(5), (int)pgm_msecs(10),
			(int)pgm_msecs(25), (int)pgm_msecs(50), (int)pgm_msecs(100), (int)pgm_msecs(250),
			(int)pgm_msecs(500), (int)pgm_msecs(1000),
		};
		if (!pgm_setsockopt(s, IPPROTO_PGM, PGM_HEARTBEAT_SPM, hb, sizeof(hb)))
			die(1, "OpenPGM rejected PGM_HEARTBEAT_SPM");
	} else {
		set_int(s, PGM_RECV_ONLY, 1, "PGM_RECV_ONLY");
		set_int(s, PGM_PASSIVE, 0, "PGM_PASSIVE");
		set_int(s, PGM_RXW_SQNS, o->rxw_sqns, "PGM_RXW_SQNS");
		set_int(s, PGM_PEER_EXPIRY, (int)pgm_secs(300), "PGM_PEER_EXPIRY");
		set_int(s, PGM_SPMR_EXPIRY, (int)pgm_msecs(250), "PGM_SPMR_EXPIRY");
		set_int(s, PGM_NAK_BO_IVL, (int)pgm_msecs(o->nak_bo_ms), "PGM_NAK_BO_IVL");
		set_int(s, PGM_NAK_RPT_IVL, (int)pgm_msecs(o->nak_rpt_ms), "PGM_NAK_RPT_IVL");
		set_int(s, PGM_NAK_RDATA_IVL, (int)pgm_msecs(o->nak_rdata_ms), "PGM_NAK_RDATA_IVL");
		set_int(s, PGM_NAK_DATA_RETRIES, o->nak_retries, "PGM_NAK_DATA_RETRIES");
		set_int(s, PGM_NAK_NCF_RETRIES, o->nak_retries, "PGM_NAK_NCF_RETRIES");
	}

	struct pgm_sockaddr_t addr;
	memset(&addr, 0, sizeof(addr));
	addr.sa_port = (uint16_t)o->dport;
	addr.sa_addr.sport = 0;
	char host[128] = "host";
	(void)gethostname(host, sizeof(host) - 1);
	char gsi_src[256];
	snprintf(gsi_src, sizeof(gsi_src), "openpgm-peer/%s/%ld/%s/%lld", host, (long)getpid(), role,
		 (long long)mono_ns());
	if (!pgm_gsi_create_from_string(&addr.sa_addr.gsi, gsi_src, -1))
		die(1, "creating a GSI failed");

	struct pgm_interface_req_t if_req;
	memset(&if_req, 0, sizeof(if_req));
	if_req.ir_interface = res->ai_recv_addrs[0].gsr_interface;
	memcpy(&if_req.ir_address, &res->ai_send_addrs[0].gsr_addr, sizeof(struct sockaddr_storage));
	if (!pgm_bind3(s, &addr, sizeof(addr), &if_req, sizeof(if_req), &if_req, sizeof(if_req), &err))
		die(1, "binding the PGM socket on '%s' port %d: %s", o->network, udp_port,
		    err && err->message ? err->message : "failed");

	for (unsigned i = 0; i < res->ai_recv_addrs_len; i++)
		if (!pgm_setsockopt(s, IPPROTO_PGM, PGM_JOIN_GROUP, &res->ai_recv_addrs[i],
				    sizeof(struct pgm_group_source_req)))
			die(1, "joining the group of '%s' failed", o->network);
	if (!pgm_setsockopt(s, IPPROTO_PGM, PGM_SEND_GROUP, &res->ai_send_addrs[0], sizeof(struct pgm_group_source_req)))
		die(1, "setting the send group of '%s' failed", o->network);
	ps->ifindex = res->ai_recv_addrs[0].gsr_interface;
	pgm_freeaddrinfo(res);

	set_int(s, PGM_MULTICAST_LOOP, 0, "PGM_MULTICAST_LOOP");
	set_int(s, PGM_MULTICAST_HOPS, 1, "PGM_MULTICAST_HOPS");
	set_int(s, PGM_NOBLOCK, 1, "PGM_NOBLOCK");

	if (!pgm_connect(s, &err))
		die(1, "connecting the PGM socket: %s", err && err->message ? err->message : "failed");
	enlarge_buffers(s, sender);
	ps->sock = s;
}

/* Time OpenPGM wants to be called again, in ns, after a non-NORMAL status. */
static int64_t pgm_wait_ns(pgm_sock_t *s, int status)
{
	struct timeval tv;
	socklen_t l = sizeof(tv);
	if (status == PGM_IO_STATUS_TIMER_PENDING) {
		if (pgm_getsockopt(s, IPPROTO_PGM, PGM_TIME_REMAIN, &tv, &l))
			return (int64_t)tv.tv_sec * 1000000000LL + (int64_t)tv.tv_usec * 1000LL;
	} else if (status == PGM_IO_STATUS_RATE_LIMITED) {
		if (pgm_getsockopt(s, IPPROTO_PGM, PGM_RATE_REMAIN, &tv, &l))
			return (int64_t)tv.tv_sec * 1000000000LL + (int64_t)tv.tv_usec * 1000LL;
	}
	return -1; /* only I/O */
}

/* Wait on up to two PGM sockets plus the wire socket until something is readable
 * or timeout_ns passes (<0 = up to 100 ms, so signals and deadlines are noticed). */
static void wait_io(pgm_sock_t *a, pgm_sock_t *b, const struct wire *w, int64_t timeout_ns, bool want_write_a)
{
	struct pollfd fds[16];
	int n = 0;
	int cnt = 8;
	if (a) {
		if (pgm_poll_info(a, &fds[n], &cnt, POLLIN | (want_write_a ? POLLOUT : 0)) > 0)
			n += cnt;
	}
	if (b) {
		cnt = 8;
		if (pgm_poll_info(b, &fds[n], &cnt, POLLIN) > 0)
			n += cnt;
	}
	(void)w; /* the wire socket is drained on the way, no need to wake for it */
	if (timeout_ns < 0 || timeout_ns > 100000000LL)
		timeout_ns = 100000000LL;
	struct timespec ts = { .tv_sec = timeout_ns / 1000000000LL, .tv_nsec = timeout_ns % 1000000000LL };
	(void)ppoll(fds, (nfds_t)n, &ts, NULL);
}

/* Let a source socket process NAKs/SPMRs, send NCF/RDATA and SPMs.
 * Returns the ns until its next timer, or -1. */
static int64_t service_source(pgm_sock_t *s)
{
	char dummy[64];
	size_t got = 0;
	pgm_error_t *err = NULL;
	int st = pgm_recv(s, dummy, sizeof(dummy), MSG_DONTWAIT, &got, &err);
	if (err)
		pgm_error_free(err);
	return pgm_wait_ns(s, st);
}

/* Send one message, servicing the socket while OpenPGM says it would block.
 * Returns false only if a stop was requested. */
static bool send_one(pgm_sock_t *s, const void *buf, size_t len, pgm_sock_t *also)
{
	for (;;) {
		size_t sent = 0;
		int st = pgm_send(s, buf, len, &sent);
		if (st == PGM_IO_STATUS_NORMAL)
			return true;
		if (st == PGM_IO_STATUS_ERROR)
			die(1, "pgm_send failed (message of %zu bytes)", len);
		if (g_stop)
			return false;
		int64_t t = pgm_wait_ns(s, st);
		int64_t t2 = service_source(s);
		if (t2 >= 0 && (t < 0 || t2 < t))
			t = t2;
		wait_io(s, also, NULL, t < 0 ? 1000000 : t, st == PGM_IO_STATUS_WOULD_BLOCK);
	}
}

/* ------------------------------------------------------------------ subcommands */

static void print_wire_json(FILE *f, const struct wire *w, bool sender)
{
	if (!w->on) {
		if (sender)
			fprintf(f, ",\"naks_received\":null,\"rdata_sent\":null,\"ncf_sent\":null,\"spm_sent\":null,"
				   "\"spmr_received\":null,\"wire_stats\":false");
		else
			fprintf(f, ",\"naks_sent\":null,\"rdata_received\":null,\"ncf_received\":null,"
				   "\"spm_received\":null,\"wire_stats\":false");
		return;
	}
	if (sender)
		fprintf(f,
			",\"naks_received\":%" PRIu64 ",\"rdata_sent\":%" PRIu64 ",\"ncf_sent\":%" PRIu64
			",\"spm_sent\":%" PRIu64 ",\"spmr_received\":%" PRIu64 ",\"wire_stats\":true,\"wire_drops\":%" PRIu64,
			w->in[PGM_TYPE_NAK], w->out[PGM_TYPE_RDATA], w->out[PGM_TYPE_NCF], w->out[PGM_TYPE_SPM],
			w->in[PGM_TYPE_SPMR], w->drops);
	else
		fprintf(f,
			",\"naks_sent\":%" PRIu64 ",\"rdata_received\":%" PRIu64 ",\"ncf_received\":%" PRIu64
			",\"spm_received\":%" PRIu64 ",\"wire_stats\":true,\"wire_drops\":%" PRIu64,
			w->out[PGM_TYPE_NAK], w->in[PGM_TYPE_RDATA], w->in[PGM_TYPE_NCF], w->in[PGM_TYPE_SPM], w->drops);
}

static int cmd_send(const struct opts *o)
{
	if (o->count < 1)
		die(2, "send needs --count N (N >= 1)");
	if (o->size < 8)
		die(2, "send needs --size S with S >= 8 (the counter takes 8 bytes)");
	if (o->format == FMT_WS_COUNTER && o->size % 8 != 0)
		die(2, "--format wirespeed-counter needs --size S a multiple of 8 (whole 64-bit words)");
	if (o->expect_end)
		die(2, "--expect-end is a recv option");
	struct peer_sock ps;
	open_pgm(&ps, o, o->port, true, "send");
	struct wire w;
	wire_open(&w, o->wire_stats, o->port, ps.ifindex);

	uint8_t *buf = malloc((size_t)o->size);
	if (!buf)
		die(1, "out of memory");
	const int64_t period = o->rate > 0 ? (int64_t)(1e9 / o->rate) : 0;
	const int64_t t0 = mono_ns();
	int64_t due = t0;
	long long k = 0;
	uint64_t bytes = 0;
	while (k < o->count && !g_stop) {
		int64_t tnext = service_source(ps.sock);
		wire_drain(&w);
		if (period) {
			int64_t now = mono_ns();
			if (now < due) {
				int64_t t = due - now;
				if (tnext >= 0 && tnext < t)
					t = tnext;
				wait_io(ps.sock, NULL, &w, t, false);
				continue;
			}
		}
		if (o->format == FMT_WS_COUNTER) {
			fill_ws_counter(buf, (size_t)o->size, (uint64_t)k);
		} else {
			put_be64(buf, (uint64_t)k);
			fill_pattern(buf, 8, (size_t)o->size, (uint64_t)k);
		}
		if (!send_one(ps.sock, buf, (size_t)o->size, NULL))
			break;
		bytes += (uint64_t)o->size;
		k++;
		due += period;
	}
	const int64_t t_end = mono_ns();
	/* linger: answer NAKs for the tail, send heartbeat SPMs */
	const int64_t linger_end = mono_ns() + (int64_t)o->linger_ms * 1000000LL;
	while (!g_stop) {
		int64_t now = mono_ns();
		if (now >= linger_end)
			break;
		int64_t t = service_source(ps.sock);
		wire_drain(&w);
		int64_t left = linger_end - now;
		wait_io(ps.sock, NULL, &w, (t >= 0 && t < left) ? t : left, false);
	}
	wire_drain(&w);
	pgm_close(ps.sock, true);
	wire_close(&w);
	double secs = (double)(t_end - t0) / 1e9;
	printf("{\"sent\":%lld,\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"pps\":%.1f", k, bytes, secs,
	       secs > 0 ? (double)k / secs : 0.0);
	print_wire_json(stdout, &w, true);
	printf("}\n");
	fflush(stdout);
	free(buf);
	return k == o->count ? 0 : 1;
}

/* Gather one message (maybe several fragments) into out; returns its length. */
static size_t gather(const struct pgm_msgv_t *m, uint8_t *out, size_t cap)
{
	size_t len = 0;
	for (uint32_t j = 0; j < m->msgv_len; j++) {
		const struct pgm_sk_buff_t *skb = m->msgv_skb[j];
		size_t l = skb->len;
		if (len + l > cap)
			l = cap - len;
		memcpy(out + len, skb->data, l);
		len += l;
	}
	return len;
}

static int cmd_recv(const struct opts *o)
{
	if (o->count < 1)
		die(2, "recv needs --count N (N >= 1)");
	if (o->expect_end && o->format != FMT_WS_COUNTER)
		die(2, "--expect-end needs --format wirespeed-counter (the end message is wirespeed's)");
	struct peer_sock ps;
	open_pgm(&ps, o, o->port, false, "recv");
	struct wire w;
	wire_open(&w, o->wire_stats, o->port, ps.ifindex);
	/* joined and NAK-ready: a test starts the source only after this line, so that the first
	 * SPM (which fixes where the receive window starts) is not missed */
	fprintf(stderr, "%s: recv ready on port %d\n", g_prog, o->port);
	fflush(stderr);

	static struct pgm_msgv_t msgv[64];
	static uint8_t msg[MAX_MSG];
	long long received = 0, corrupt = 0, resets = 0, out_of_order = 0, after_end = 0;
	long long first = -1, last = -1;
	int64_t expect_size = -1;
	long long size_mismatch = 0;
	uint64_t bytes = 0;
	struct ws_end end;
	memset(&end, 0, sizeof(end));
	const int64_t deadline = mono_ns() + (int64_t)o->timeout_ms * 1000000LL;
	bool timed_out = false;
	while ((received < o->count || (o->expect_end && !end.seen)) && !g_stop) {
		if (mono_ns() >= deadline) {
			timed_out = true;
			break;
		}
		size_t got = 0;
		pgm_error_t *err = NULL;
		int st = pgm_recvmsgv(ps.sock, msgv, sizeof(msgv) / sizeof(msgv[0]), 0, &got, &err);
		if (err) {
			pgm_error_free(err);
			err = NULL;
		}
		wire_drain(&w);
		if (st == PGM_IO_STATUS_NORMAL) {
			size_t remaining = got;
			for (size_t i = 0; remaining > 0 && i < sizeof(msgv) / sizeof(msgv[0]); i++) {
				size_t len = gather(&msgv[i], msg, sizeof(msg));
				remaining -= len <= remaining ? len : remaining;
				if (end.seen) {
					/* nothing may follow wirespeed's end message */
					after_end++;
					continue;
				}
				if (o->format == FMT_WS_COUNTER && is_ws_end(msg, len)) {
					parse_ws_end(msg, &end);
					continue;
				}
				bytes += len;
				received++;
				if (expect_size < 0)
					expect_size = (int64_t)len;
				else if ((int64_t)len != expect_size)
					size_mismatch++;
				long long k;
				if (o->format == FMT_WS_COUNTER) {
					k = check_ws_counter(msg, len);
					if (k < 0) {
						corrupt++;
						continue;
					}
				} else {
					if (len < 8) {
						corrupt++;
						continue;
					}
					k = (long long)get_be64(msg);
					if (!check_pattern(msg, 8, len, (uint64_t)k))
						corrupt++;
				}
				if (first < 0) {
					first = k;
					if (k != 0)
						out_of_order++;
				} else if (k != last + 1) {
					out_of_order++;
				}
				last = k;
			}
		} else if (st == PGM_IO_STATUS_RESET) {
			resets++;
		} else if (st == PGM_IO_STATUS_ERROR) {
			die(1, "pgm_recvmsgv failed");
		} else {
			int64_t t = pgm_wait_ns(ps.sock, st);
			int64_t left = deadline - mono_ns();
			wait_io(ps.sock, NULL, &w, (t >= 0 && t < left) ? t : left, false);
		}
	}
	/* keep the window alive briefly so late duplicates do not provoke anything */
	wire_drain(&w);
	pgm_close(ps.sock, false);
	wire_close(&w);
	/* first < 0: not one message could be read (all corrupt) */
	const bool in_order = out_of_order == 0 && received > 0 && first >= 0;
	/* the end message must say: this run's one stream sent exactly messages 0..count-1 */
	const bool end_ok = end.seen && end.valid && end.stream_index == 0 && end.stream_count == 1 &&
			    end.first_seq == 0 && end.last_seq == (uint64_t)o->count - 1 &&
			    end.sent == (uint64_t)o->count && end.skipped == 0;
	printf("{\"received\":%lld,\"in_order\":%s,\"first\":%lld,\"last\":%lld,\"corrupt\":%lld,\"resets\":%lld,"
	       "\"bytes\":%" PRIu64 ",\"size_mismatch\":%lld,\"timed_out\":%s,\"format\":\"%s\"",
	       received, in_order ? "true" : "false", first, last, corrupt, resets, bytes, size_mismatch,
	       timed_out ? "true" : "false", o->format == FMT_WS_COUNTER ? "wirespeed-counter" : "peer");
	if (o->format == FMT_WS_COUNTER) {
		if (end.seen)
			printf(",\"end_of_stream\":{\"valid\":%s,\"stream_index\":%" PRIu32 ",\"stream_count\":%" PRIu32
			       ",\"session\":%" PRIu64 ",\"first_seq\":%" PRIu64 ",\"last_seq\":%" PRIu64
			       ",\"sent\":%" PRIu64 ",\"skipped\":%" PRIu64 "}",
			       end.valid ? "true" : "false", end.stream_index, end.stream_count, end.session,
			       end.first_seq, end.last_seq, end.sent, end.skipped);
		else
			printf(",\"end_of_stream\":null");
		printf(",\"end_ok\":%s,\"after_end\":%lld", end_ok ? "true" : "false", after_end);
	}
	print_wire_json(stdout, &w, false);
	printf("}\n");
	fflush(stdout);
	const bool ok = received == o->count && in_order && corrupt == 0 && resets == 0 && first == 0 &&
			last == o->count - 1 && size_mismatch == 0 && after_end == 0 && (!o->expect_end || end_ok);
	return ok ? 0 : 1;
}

static int cmd_reflect(const struct opts *o)
{
	if (o->reply_port <= 0)
		die(2, "reflect needs --reply-port Q");
	if (o->reply_port == o->port)
		die(2, "reflect needs --reply-port different from --port");
	struct peer_sock rx, tx;
	open_pgm(&rx, o, o->port, false, "reflect-rx");
	open_pgm(&tx, o, o->reply_port, true, "reflect-tx");
	static struct pgm_msgv_t msgv[64];
	static uint8_t msg[MAX_MSG];
	long long reflected = 0, resets = 0;
	uint64_t bytes = 0;
	while (!g_stop) {
		size_t got = 0;
		pgm_error_t *err = NULL;
		int st = pgm_recvmsgv(rx.sock, msgv, sizeof(msgv) / sizeof(msgv[0]), 0, &got, &err);
		if (err) {
			pgm_error_free(err);
			err = NULL;
		}
		int64_t ttx = service_source(tx.sock);
		if (st == PGM_IO_STATUS_NORMAL) {
			size_t remaining = got;
			for (size_t i = 0; remaining > 0 && i < sizeof(msgv) / sizeof(msgv[0]); i++) {
				size_t len = gather(&msgv[i], msg, sizeof(msg));
				remaining -= len <= remaining ? len : remaining;
				if (!send_one(tx.sock, msg, len, rx.sock))
					break;
				reflected++;
				bytes += len;
			}
		} else if (st == PGM_IO_STATUS_RESET) {
			resets++;
		} else if (st == PGM_IO_STATUS_ERROR) {
			die(1, "pgm_recvmsgv failed");
		} else {
			int64_t t = pgm_wait_ns(rx.sock, st);
			if (ttx >= 0 && (t < 0 || ttx < t))
				t = ttx;
			wait_io(rx.sock, tx.sock, NULL, t, false);
		}
	}
	/* let the last replies be repaired if needed, then close */
	const int64_t end = mono_ns() + (int64_t)o->linger_ms * 1000000LL;
	g_stop = 0;
	while (mono_ns() < end && !g_stop) {
		int64_t t = service_source(tx.sock);
		wait_io(tx.sock, NULL, NULL, t, false);
	}
	pgm_close(rx.sock, false);
	pgm_close(tx.sock, true);
	printf("{\"reflected\":%lld,\"bytes\":%" PRIu64 ",\"resets\":%lld}\n", reflected, bytes, resets);
	fflush(stdout);
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int64_t pct(const int64_t *sorted, size_t n, double p)
{
	if (n == 0)
		return -1;
	size_t idx = (size_t)(p / 100.0 * (double)n);
	if (idx >= n)
		idx = n - 1;
	return sorted[idx];
}

static int cmd_ping(const struct opts *o)
{
	if (o->reply_port <= 0)
		die(2, "ping needs --reply-port Q");
	if (o->reply_port == o->port)
		die(2, "ping needs --reply-port different from --port");
	if (o->count < 1 || o->count > 100000000LL)
		die(2, "ping needs --count N (1..100000000)");
	if (o->size < 16)
		die(2, "ping needs --size S with S >= 16 (counter and timestamp take 16 bytes)");
	if (!(o->rate > 0))
		die(2, "ping needs --rate PPS > 0");
	struct peer_sock tx, rx;
	open_pgm(&rx, o, o->reply_port, false, "ping-rx");
	open_pgm(&tx, o, o->port, true, "ping-tx");

	const size_t n = (size_t)o->count;
	int64_t *send_t = malloc(n * sizeof(int64_t));
	int64_t *rtt = malloc(n * sizeof(int64_t));
	uint8_t *buf = malloc((size_t)o->size);
	if (!send_t || !rtt || !buf)
		die(1, "out of memory");
	for (size_t i = 0; i < n; i++)
		rtt[i] = -1;
	static struct pgm_msgv_t msgv[64];
	static uint8_t msg[MAX_MSG];
	long long received = 0, corrupt = 0, dups = 0, unknown = 0, resets = 0;
	const int64_t period = (int64_t)(1e9 / o->rate);
	const int64_t t0 = mono_ns();
	int64_t due = t0;
	size_t k = 0;
	int64_t wait_end = -1;
	while (!g_stop) {
		int64_t now = mono_ns();
		if (k == n && wait_end < 0)
			wait_end = now + (int64_t)o->wait_ms * 1000000LL;
		if (k == n && ((long long)received == o->count || now >= wait_end))
			break;
		int64_t ttx = service_source(tx.sock);
		if (k < n && now >= due) {
			put_be64(buf, (uint64_t)k);
			int64_t ts = mono_ns();
			put_be64(buf + 8, (uint64_t)ts);
			fill_pattern(buf, 16, (size_t)o->size, (uint64_t)k);
			send_t[k] = ts;
			if (!send_one(tx.sock, buf, (size_t)o->size, rx.sock))
				break;
			k++;
			due += period;
		}
		size_t got = 0;
		pgm_error_t *err = NULL;
		int st = pgm_recvmsgv(rx.sock, msgv, sizeof(msgv) / sizeof(msgv[0]), 0, &got, &err);
		if (err) {
			pgm_error_free(err);
			err = NULL;
		}
		if (st == PGM_IO_STATUS_NORMAL) {
			const int64_t tr = mono_ns();
			size_t remaining = got;
			for (size_t i = 0; remaining > 0 && i < sizeof(msgv) / sizeof(msgv[0]); i++) {
				size_t len = gather(&msgv[i], msg, sizeof(msg));
				remaining -= len <= remaining ? len : remaining;
				if (len < 16) {
					corrupt++;
					continue;
				}
				uint64_t c = get_be64(msg);
				if (c >= k) {
					unknown++;
					continue;
				}
				if (!check_pattern(msg, 16, len, c) || (int64_t)get_be64(msg + 8) != send_t[c]) {
					corrupt++;
					continue;
				}
				if (rtt[c] >= 0) {
					dups++;
					continue;
				}
				rtt[c] = tr - send_t[c];
				received++;
			}
			continue;
		} else if (st == PGM_IO_STATUS_RESET) {
			resets++;
			continue;
		} else if (st == PGM_IO_STATUS_ERROR) {
			die(1, "pgm_recvmsgv failed");
		}
		int64_t t = pgm_wait_ns(rx.sock, st);
		if (ttx >= 0 && (t < 0 || ttx < t))
			t = ttx;
		now = mono_ns();
		if (k < n) {
			int64_t d = due - now;
			if (d < 0)
				d = 0;
			if (t < 0 || d < t)
				t = d;
		}
		wait_io(rx.sock, tx.sock, NULL, t, false);
	}
	/* short linger so the reflector's NAKs for our tail get answered */
	const int64_t end = mono_ns() + 200000000LL;
	while (mono_ns() < end && !g_stop) {
		int64_t t = service_source(tx.sock);
		wait_io(tx.sock, NULL, NULL, t, false);
	}
	pgm_close(tx.sock, true);
	pgm_close(rx.sock, false);

	int64_t *sorted = malloc(n * sizeof(int64_t));
	if (!sorted)
		die(1, "out of memory");
	size_t m = 0;
	for (size_t i = 0; i < k; i++)
		if (rtt[i] >= 0)
			sorted[m++] = rtt[i];
	qsort(sorted, m, sizeof(int64_t), cmp_i64);
	if (o->rtt_out) {
		FILE *f = fopen(o->rtt_out, "w");
		if (!f)
			die(1, "--rtt-out '%s': %s", o->rtt_out, strerror(errno));
		for (size_t i = 0; i < k; i++)
			if (rtt[i] >= 0)
				fprintf(f, "%" PRId64 " %" PRId64 "\n", send_t[i] - t0, rtt[i]);
		if (fclose(f) != 0)
			die(1, "--rtt-out '%s': write failed", o->rtt_out);
	}
	printf("{\"sent\":%zu,\"received\":%lld,\"lost\":%lld,\"corrupt\":%lld,\"duplicates\":%lld,\"unknown\":%lld,"
	       "\"resets\":%lld,\"rate_pps\":%.1f,\"size\":%d,\"rtt_ns\":{\"min\":%" PRId64 ",\"p50\":%" PRId64
	       ",\"p90\":%" PRId64 ",\"p99\":%" PRId64 ",\"p99.9\":%" PRId64 ",\"max\":%" PRId64 "}",
	       k, received, (long long)k - received, corrupt, dups, unknown, resets, o->rate, o->size,
	       m ? sorted[0] : -1, pct(sorted, m, 50), pct(sorted, m, 90), pct(sorted, m, 99), pct(sorted, m, 99.9),
	       m ? sorted[m - 1] : -1);
	if (o->rtt_out) {
		printf(",\"rtt_out\":\"");
		for (const char *p = o->rtt_out; *p; p++) {
			if (*p == '"' || *p == '\\')
				putchar('\\');
			putchar(*p);
		}
		printf("\"");
	}
	printf("}\n");
	fflush(stdout);
	free(sorted);
	free(send_t);
	free(rtt);
	free(buf);
	return ((long long)k == o->count && received == o->count && corrupt == 0) ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage();
		return argc < 2 ? 2 : 0;
	}
	const char *cmd = argv[1];
	struct opts o = {
		.network = NULL, .port = 0, .reply_port = 0, .dport = 7500, .count = 0, .size = 0, .rate = 0,
		.txw_sqns = 32768, .rxw_sqns = 32768, .linger_ms = 2000, .timeout_ms = 60000, .wait_ms = 2000,
		.mtu = 9000, .nak_bo_ms = 5, .nak_rpt_ms = 50, .nak_rdata_ms = 50, .nak_retries = 20,
		.spm_ambient_ms = 200, .wire_stats = -1, .rtt_out = NULL, .format = FMT_PEER, .expect_end = 0,
	};
	enum {
		O_NETWORK = 1000, O_PORT, O_REPLY, O_DPORT, O_COUNT, O_SIZE, O_RATE, O_TXW, O_RXW, O_LINGER,
		O_TIMEOUT, O_WAIT, O_MTU, O_BO, O_RPT, O_RDATA, O_RETRIES, O_AMBIENT, O_WIRE, O_NOWIRE, O_RTT,
		O_FORMAT, O_EXPECT_END
	};
	static const struct option longopts[] = {
		{ "network", required_argument, NULL, O_NETWORK },
		{ "port", required_argument, NULL, O_PORT },
		{ "reply-port", required_argument, NULL, O_REPLY },
		{ "dport", required_argument, NULL, O_DPORT },
		{ "count", required_argument, NULL, O_COUNT },
		{ "size", required_argument, NULL, O_SIZE },
		{ "rate", required_argument, NULL, O_RATE },
		{ "txw-sqns", required_argument, NULL, O_TXW },
		{ "rxw-sqns", required_argument, NULL, O_RXW },
		{ "linger-ms", required_argument, NULL, O_LINGER },
		{ "timeout-ms", required_argument, NULL, O_TIMEOUT },
		{ "wait-ms", required_argument, NULL, O_WAIT },
		{ "mtu", required_argument, NULL, O_MTU },
		{ "nak-bo-ms", required_argument, NULL, O_BO },
		{ "nak-rpt-ms", required_argument, NULL, O_RPT },
		{ "nak-rdata-ms", required_argument, NULL, O_RDATA },
		{ "nak-retries", required_argument, NULL, O_RETRIES },
		{ "spm-ambient-ms", required_argument, NULL, O_AMBIENT },
		{ "wire-stats", no_argument, NULL, O_WIRE },
		{ "no-wire-stats", no_argument, NULL, O_NOWIRE },
		{ "rtt-out", required_argument, NULL, O_RTT },
		{ "format", required_argument, NULL, O_FORMAT },
		{ "expect-end", no_argument, NULL, O_EXPECT_END },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 2;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_NETWORK: o.network = optarg; break;
		case O_PORT: o.port = (int)parse_int("port", optarg, 1, 65535); break;
		case O_REPLY: o.reply_port = (int)parse_int("reply-port", optarg, 1, 65535); break;
		case O_DPORT: o.dport = (int)parse_int("dport", optarg, 1, 65535); break;
		case O_COUNT: o.count = parse_int("count", optarg, 1, INT64_MAX / 2); break;
		case O_SIZE: o.size = (int)parse_int("size", optarg, 1, MAX_MSG); break;
		case O_RATE: o.rate = parse_rate(optarg); break;
		case O_TXW: o.txw_sqns = (int)parse_int("txw-sqns", optarg, 1, 1 << 30); break;
		case O_RXW: o.rxw_sqns = (int)parse_int("rxw-sqns", optarg, 1, 1 << 30); break;
		case O_LINGER: o.linger_ms = (int)parse_int("linger-ms", optarg, 0, 86400000); break;
		case O_TIMEOUT: o.timeout_ms = (int)parse_int("timeout-ms", optarg, 1, 86400000); break;
		case O_WAIT: o.wait_ms = (int)parse_int("wait-ms", optarg, 0, 86400000); break;
		case O_MTU: o.mtu = (int)parse_int("mtu", optarg, 576, 65535); break;
		case O_BO: o.nak_bo_ms = (int)parse_int("nak-bo-ms", optarg, 1, 60000); break;
		case O_RPT: o.nak_rpt_ms = (int)parse_int("nak-rpt-ms", optarg, 1, 60000); break;
		case O_RDATA: o.nak_rdata_ms = (int)parse_int("nak-rdata-ms", optarg, 1, 60000); break;
		case O_RETRIES: o.nak_retries = (int)parse_int("nak-retries", optarg, 1, 255); break;
		case O_AMBIENT: o.spm_ambient_ms = (int)parse_int("spm-ambient-ms", optarg, 1, 3600000); break;
		case O_WIRE: o.wire_stats = 1; break;
		case O_NOWIRE: o.wire_stats = 0; break;
		case O_RTT: o.rtt_out = optarg; break;
		case O_FORMAT:
			if (!strcmp(optarg, "peer"))
				o.format = FMT_PEER;
			else if (!strcmp(optarg, "wirespeed-counter"))
				o.format = FMT_WS_COUNTER;
			else
				die(2, "--format: '%s' is not peer or wirespeed-counter", optarg);
			break;
		case O_EXPECT_END: o.expect_end = 1; break;
		case 'h': usage(); return 0;
		default:
			die(2, "unknown or incomplete option '%s' (see %s --help)", argv[optind - 1], g_prog);
		}
	}
	if (optind < argc)
		die(2, "unexpected argument '%s' (see %s --help)", argv[optind], g_prog);
	if (strcmp(cmd, "send") && strcmp(cmd, "recv") && strcmp(cmd, "reflect") && strcmp(cmd, "ping"))
		die(2, "unknown subcommand '%s': use send, recv, reflect or ping", cmd);
	if (!o.network)
		die(2, "%s needs --network \"IFACE_OR_ADDR;GROUP\"", cmd);
	if (!o.port)
		die(2, "%s needs --port P (UDP encapsulation port)", cmd);
	if ((o.format != FMT_PEER || o.expect_end) && strcmp(cmd, "send") && strcmp(cmd, "recv"))
		die(2, "--format and --expect-end are send/recv options, not %s ones", cmd);
	if (o.wire_stats == -1)
		o.wire_stats = geteuid() == 0 ? -1 : 0; /* -1: try, fall back silently */

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	pgm_error_t *err = NULL;
	if (!pgm_init(&err))
		die(1, "starting the OpenPGM engine: %s", err && err->message ? err->message : "failed");

	int rc;
	if (!strcmp(cmd, "send"))
		rc = cmd_send(&o);
	else if (!strcmp(cmd, "recv"))
		rc = cmd_recv(&o);
	else if (!strcmp(cmd, "reflect"))
		rc = cmd_reflect(&o);
	else
		rc = cmd_ping(&o);
	pgm_shutdown();
	return rc;
}
