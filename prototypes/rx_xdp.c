/* AF_XDP receive: a hand-assembled XDP program (no compiler) redirects IPv4/UDP frames for the
 * port to an XSKMAP slot chosen by rx queue index; one XSK socket (copy mode: veth has no
 * zero-copy) with a 16384-frame UMEM, fill and RX rings, polled when the RX ring is empty. The
 * program is attached in generic (SKB) mode, or with -N in native (driver) mode, which veth
 * supports since 4.19 (frames coming from the stack are converted to XDP buffers in veth's NAPI
 * poll). Everything that is not the port's IPv4/UDP (ARP, ...) passes to the stack. */
#include "common.h"
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <xdp/xsk.h>

#define NFRAMES 16384 /* 32 MiB UMEM, 8192-slot RX ring: about what a 16 MiB socket buffer holds */
#define FRAME 2048

/* Minimal eBPF instruction builders (the kernel's filter.h macros are not in the uapi headers). */
#define INSN(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })
#define LDX(sz, d, s, o) INSN(BPF_LDX | BPF_MEM | (sz), d, s, o, 0)
#define MOV_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD_IMM(d, i) INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define JGT_REG(d, s, o) INSN(BPF_JMP | BPF_JGT | BPF_X, d, s, o, 0)
#define JNE_IMM(d, i, o) INSN(BPF_JMP | BPF_JNE | BPF_K, d, 0, o, i)
#define CALL(f) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

static int load_prog(int map_fd, int port)
{
	/* r1 = ctx (struct xdp_md: data @0, data_end @4, rx_queue_index @16). "pass" is insn 19. */
	struct bpf_insn prog[] = {
		/* 0 */ LDX(BPF_W, 2, 1, 0),               /* r2 = data */
		/* 1 */ LDX(BPF_W, 3, 1, 4),               /* r3 = data_end */
		/* 2 */ MOV_REG(4, 2),
		/* 3 */ ADD_IMM(4, 42),                    /* eth 14 + ip 20 + udp 8 */
		/* 4 */ JGT_REG(4, 3, 14),                 /* too short -> pass */
		/* 5 */ LDX(BPF_H, 5, 2, 12),              /* ethertype */
		/* 6 */ JNE_IMM(5, htons(0x0800), 12),
		/* 7 */ LDX(BPF_B, 5, 2, 14),              /* version/IHL: only 0x45 */
		/* 8 */ JNE_IMM(5, 0x45, 10),
		/* 9 */ LDX(BPF_B, 5, 2, 23),              /* IP protocol */
		/* 10 */ JNE_IMM(5, 17, 8),
		/* 11 */ LDX(BPF_H, 5, 2, 36),             /* UDP destination port */
		/* 12 */ JNE_IMM(5, htons(port), 6),
		/* 13 */ LDX(BPF_W, 2, 1, 16),             /* key = rx_queue_index */
		/* 14 */ INSN(BPF_LD | BPF_DW | BPF_IMM, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
		/* 15 */ INSN(0, 0, 0, 0, 0),
		/* 16 */ MOV_IMM(3, XDP_PASS),             /* no socket in the slot -> pass */
		/* 17 */ CALL(BPF_FUNC_redirect_map),
		/* 18 */ EXIT(),
		/* 19 */ MOV_IMM(0, XDP_PASS),
		/* 20 */ EXIT(),
	};
	static char log[65536];
	LIBBPF_OPTS(bpf_prog_load_opts, po, .log_buf = log, .log_size = sizeof(log), .log_level = 1);
	int fd = bpf_prog_load(BPF_PROG_TYPE_XDP, "xsk_udp", "GPL", prog, sizeof(prog) / sizeof(prog[0]), &po);
	if (fd < 0) {
		fprintf(stderr, "bpf_prog_load: %s\n%s\n", strerror(errno), log);
		exit(1);
	}
	return fd;
}

static int ifindex;
static __u32 xdp_flags;
static void detach(void)
{
	if (ifindex)
		bpf_xdp_detach(ifindex, xdp_flags, NULL);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse_opts(argc, argv, &o);
	if (!o.ifname) {
		fprintf(stderr, "rx_xdp: -i IFACE is required\n");
		usage(argv[0]);
	}
	install_signals();
	int ifi = if_nametoindex(o.ifname);
	if (!ifi) {
		fprintf(stderr, "rx_xdp: no interface %s\n", o.ifname);
		return 1;
	}
	int map_fd = bpf_map_create(BPF_MAP_TYPE_XSKMAP, "xsks", 4, 4, 64, NULL);
	if (map_fd < 0) {
		perror("bpf_map_create(XSKMAP)");
		return 1;
	}
	int prog_fd = load_prog(map_fd, o.port);

	/* UMEM and rings. */
	void *area = mmap(NULL, (size_t)NFRAMES * FRAME, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (area == MAP_FAILED) {
		perror("mmap umem");
		return 1;
	}
	struct xsk_ring_prod fill;
	struct xsk_ring_cons comp, rx;
	struct xsk_umem *umem;
	struct xsk_umem_config ucfg = { .fill_size = NFRAMES, .comp_size = 64, .frame_size = FRAME,
					.frame_headroom = 0, .flags = 0 };
	int r = xsk_umem__create(&umem, area, (size_t)NFRAMES * FRAME, &fill, &comp, &ucfg);
	if (r) {
		fprintf(stderr, "xsk_umem__create: %s\n", strerror(-r));
		return 1;
	}
	struct xsk_socket *xsk;
	struct xsk_socket_config scfg = { .rx_size = NFRAMES / 2, .tx_size = 0,
					  .libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
					  .xdp_flags = 0, .bind_flags = XDP_COPY | XDP_USE_NEED_WAKEUP };
	r = xsk_socket__create(&xsk, o.ifname, o.queue, umem, &rx, NULL, &scfg);
	if (r) {
		fprintf(stderr, "xsk_socket__create(%s, queue %d): %s\n", o.ifname, o.queue, strerror(-r));
		return 1;
	}
	int xfd = xsk_socket__fd(xsk);
	__u32 key = o.queue;
	if (bpf_map_update_elem(map_fd, &key, &xfd, 0)) {
		perror("bpf_map_update_elem(xskmap)");
		return 1;
	}
	__u32 idx;
	if (xsk_ring_prod__reserve(&fill, NFRAMES, &idx) != NFRAMES) {
		fprintf(stderr, "fill ring reserve failed\n");
		return 1;
	}
	for (unsigned i = 0; i < NFRAMES; i++)
		*xsk_ring_prod__fill_addr(&fill, idx + i) = (__u64)i * FRAME;
	xsk_ring_prod__submit(&fill, NFRAMES);

	xdp_flags = (o.native ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE);
	if (bpf_xdp_attach(ifi, prog_fd, xdp_flags, NULL)) {
		fprintf(stderr, "bpf_xdp_attach(%s, %s): %s\n", o.ifname, o.native ? "native" : "generic",
			strerror(errno));
		return 1;
	}
	ifindex = ifi;
	atexit(detach);
	const char *name = o.native ? "xdp-native" : "xdp-generic";
	fprintf(stderr, "%s: AF_XDP copy mode on %s queue %d, port %d\n", name, o.ifname, o.queue, o.port);

	struct stats s = { 0 };
	struct pollfd pfd = { .fd = xfd, .events = POLLIN };
	uint64_t notudp = 0;
	for (;;) {
		__u32 ri, fi;
		unsigned got = xsk_ring_cons__peek(&rx, o.batch, &ri);
		if (!got) {
			if (xsk_ring_prod__needs_wakeup(&fill))
				recvfrom(xfd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
			poll(&pfd, 1, 100);
		} else {
			while (xsk_ring_prod__reserve(&fill, got, &fi) != got)
				;
			for (unsigned i = 0; i < got; i++) {
				const struct xdp_desc *d = xsk_ring_cons__rx_desc(&rx, ri + i);
				const unsigned char *f = xsk_umem__get_data(area, d->addr);
				/* The program passed only IPv4 with IHL 5 to this port: payload at 42. */
				if (d->len < 42 || (((unsigned)f[38] << 8) | f[39]) != d->len - 34u) {
					notudp++;
					s.bad++;
				} else {
					account(&s, f + 42, d->len - 42);
				}
				*xsk_ring_prod__fill_addr(&fill, fi + i) = d->addr & ~(__u64)(FRAME - 1);
			}
			xsk_ring_prod__submit(&fill, got);
			xsk_ring_cons__release(&rx, got);
		}
		if (batch_done(&s, &o, got))
			break;
	}
	report(name, &s);
	struct xdp_statistics st;
	socklen_t sl = sizeof(st);
	if (!getsockopt(xfd, SOL_XDP, XDP_STATISTICS, &st, &sl))
		fprintf(stderr, "%s: rx_dropped %llu rx_invalid %llu rx_ring_full %llu fill_empty %llu\n", name,
			(unsigned long long)st.rx_dropped, (unsigned long long)st.rx_invalid_descs,
			(unsigned long long)st.rx_ring_full, (unsigned long long)st.rx_fill_ring_empty_descs);
	xsk_socket__delete(xsk);
	xsk_umem__delete(umem);
	return 0;
}
