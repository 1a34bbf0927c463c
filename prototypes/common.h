/* Shared by the three receive prototypes: arguments, the counter check and the report line.
 *
 * Every prototype receives UDP datagrams carrying wirespeed's counter payload (CASPER: datagram k
 * of W 64-bit words carries the words k*W .. k*W+W-1, big-endian by default), checks the first
 * word of each and counts exact loss from the gaps in the sequence. They all stop the same way:
 * `-t` seconds after the first datagram, or after 1 s without a datagram once traffic has begun.
 */
#ifndef PROTO_COMMON_H
#define PROTO_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

struct opts {
	int port;          /* UDP destination port */
	double seconds;    /* measure at most this long after the first datagram */
	int bufsize;       /* bytes per receive buffer */
	int batch;         /* datagrams per call (recvmmsg) / per CQ or RX ring peek */
	const char *ifname;/* AF_XDP: interface */
	int queue;         /* AF_XDP: rx queue */
	int native;        /* AF_XDP: 1 = driver (native veth) XDP, 0 = generic (SKB) XDP */
	int rcvbuf;        /* socket receive buffer, bytes */
};

static void usage(const char *me)
{
	fprintf(stderr,
		"usage: %s -p PORT [-t SECONDS] [-b BUFSIZE] [-n BATCH] [-r RCVBUF] [-i IFACE -q QUEUE -N]\n"
		"  -p PORT     UDP port to receive on (required)\n"
		"  -t SECONDS  stop this long after the first datagram (default 10), or 1 s after traffic stops\n"
		"  -b BUFSIZE  bytes per receive buffer (default 2048)\n"
		"  -n BATCH    datagrams per receive call / ring peek (default 64)\n"
		"  -r RCVBUF   socket receive buffer in bytes (default 16 MiB; sockets only)\n"
		"  -i IFACE    AF_XDP only: interface to attach to\n"
		"  -q QUEUE    AF_XDP only: rx queue (default 0)\n"
		"  -N          AF_XDP only: native (driver) XDP instead of generic (SKB) XDP\n",
		me);
	exit(2);
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	int c;
	memset(o, 0, sizeof(*o));
	o->seconds = 10;
	o->bufsize = 2048;
	o->batch = 64;
	o->rcvbuf = 16 << 20;
	while ((c = getopt(argc, argv, "p:t:b:n:r:i:q:Nh")) != -1) {
		switch (c) {
		case 'p': o->port = atoi(optarg); break;
		case 't': o->seconds = atof(optarg); break;
		case 'b': o->bufsize = atoi(optarg); break;
		case 'n': o->batch = atoi(optarg); break;
		case 'r': o->rcvbuf = atoi(optarg); break;
		case 'i': o->ifname = optarg; break;
		case 'q': o->queue = atoi(optarg); break;
		case 'N': o->native = 1; break;
		default: usage(argv[0]);
		}
	}
	if (o->port <= 0 || o->port > 65535 || o->seconds <= 0 || o->bufsize < 64 || o->batch < 1 ||
	    o->batch > 1024) {
		fprintf(stderr, "%s: bad or missing argument\n", argv[0]);
		usage(argv[0]);
	}
}

struct stats {
	uint64_t pkts, bytes, bad, late, lost;
	uint64_t first_seq, next_seq;
	int started;
	struct timespec t_first, t_last;
	double cpu_first; /* thread CPU seconds when the first datagram arrived */
};

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }
static void install_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

static inline double ts_sec(const struct timespec *t) { return t->tv_sec + t->tv_nsec * 1e-9; }

static double thread_cpu(void)
{
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec * 1e-6;
}

static inline uint64_t load_be64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return __builtin_bswap64(v);
}

/* Account one datagram payload: the first word, divided by the word count, is its sequence. */
static inline void account(struct stats *s, const unsigned char *p, size_t len)
{
	if (len < 8 || (len & 7)) {
		s->bad++;
		return;
	}
	uint64_t words = len / 8, first = load_be64(p);
	if (first % words) {
		s->bad++;
		return;
	}
	uint64_t seq = first / words;
	s->pkts++;
	s->bytes += len;
	if (!s->started) {
		s->started = 1;
		s->first_seq = seq;
		s->next_seq = seq + 1;
	} else if (seq >= s->next_seq) {
		s->lost += seq - s->next_seq;
		s->next_seq = seq + 1;
	} else {
		s->late++; /* duplicate or reordered: veth should never do this */
	}
}

/* Call after each batch: starts the clocks at the first datagram, says whether to stop. */
static inline int batch_done(struct stats *s, const struct opts *o, unsigned got)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (got) {
		if (s->t_first.tv_sec == 0) {
			s->t_first = now;
			s->cpu_first = thread_cpu();
		}
		s->t_last = now;
	}
	if (stop_flag)
		return 1;
	if (s->t_first.tv_sec == 0)
		return 0;
	if (ts_sec(&now) - ts_sec(&s->t_first) >= o->seconds)
		return 1;
	if (ts_sec(&now) - ts_sec(&s->t_last) >= 1.0)
		return 1;
	return 0;
}

static void report(const char *proto, const struct stats *s)
{
	double secs = ts_sec(&s->t_last) - ts_sec(&s->t_first);
	double cpu = thread_cpu() - s->cpu_first;
	uint64_t expected = s->started ? s->next_seq - s->first_seq : 0;
	printf("RESULT proto=%s pkts=%llu bytes=%llu secs=%.3f pps=%.0f cpu_s=%.3f cpu_ns_per_dgram=%.0f "
	       "lost=%llu loss_pct=%.4f bad=%llu late=%llu\n",
	       proto, (unsigned long long)s->pkts, (unsigned long long)s->bytes, secs,
	       secs > 0 ? s->pkts / secs : 0, cpu, s->pkts ? cpu * 1e9 / s->pkts : 0,
	       (unsigned long long)s->lost, expected ? 100.0 * s->lost / expected : 0,
	       (unsigned long long)s->bad, (unsigned long long)s->late);
	fflush(stdout);
}

#include <netinet/in.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <sys/time.h>

/* A UDP socket bound to 0.0.0.0:port, with a big receive buffer and a 100 ms receive timeout. */
static inline int udp_socket(const struct opts *o)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("socket");
		exit(1);
	}
	int v = o->rcvbuf;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
	struct timeval tv = { 0, 100000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(o->port) };
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		fprintf(stderr, "bind port %d: %s\n", o->port, strerror(errno));
		exit(1);
	}
	return fd;
}

#endif
