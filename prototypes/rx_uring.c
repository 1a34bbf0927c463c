/* io_uring multishot receive: one IORING_OP_RECV with IORING_RECV_MULTISHOT on a UDP socket,
 * buffers taken from a provided-buffer ring (kernel >= 6.0), one CQE per datagram, buffers handed
 * back in batches. The ring is set up SINGLE_ISSUER|DEFER_TASKRUN so the completion work runs in
 * this thread when it waits (falling back to COOP_TASKRUN, then to no flags). */
#include "common.h"
#include <liburing.h>
#include <sys/mman.h>

#define BGID 7
#define NBUFS 4096 /* power of two */

static void arm(struct io_uring *ring, int fd)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = BGID;
	io_uring_submit(ring);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse_opts(argc, argv, &o);
	install_signals();
	int fd = udp_socket(&o);

	struct io_uring ring;
	struct io_uring_params p;
	const char *mode = "defer_taskrun";
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE;
	p.cq_entries = 2 * NBUFS;
	int r = io_uring_queue_init_params(64, &ring, &p);
	if (r < 0) {
		mode = "coop_taskrun";
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_CQSIZE;
		p.cq_entries = 2 * NBUFS;
		r = io_uring_queue_init_params(64, &ring, &p);
	}
	if (r < 0) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-r));
		return 1;
	}

	/* Provided-buffer ring: NBUFS buffers of bufsize bytes. */
	size_t brsz = NBUFS * sizeof(struct io_uring_buf);
	struct io_uring_buf_ring *br =
		mmap(NULL, brsz, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	unsigned char *bufs = aligned_alloc(4096, (size_t)NBUFS * o.bufsize);
	if (br == MAP_FAILED || !bufs) {
		perror("alloc");
		return 1;
	}
	io_uring_buf_ring_init(br);
	struct io_uring_buf_reg reg = { .ring_addr = (unsigned long)br, .ring_entries = NBUFS, .bgid = BGID };
	r = io_uring_register_buf_ring(&ring, &reg, 0);
	if (r < 0) {
		fprintf(stderr, "io_uring_register_buf_ring: %s\n", strerror(-r));
		return 1;
	}
	int mask = io_uring_buf_ring_mask(NBUFS);
	for (int i = 0; i < NBUFS; i++)
		io_uring_buf_ring_add(br, bufs + (size_t)i * o.bufsize, o.bufsize, i, mask, i);
	io_uring_buf_ring_advance(br, NBUFS);

	arm(&ring, fd);
	fprintf(stderr, "uring: listening on port %d (%s, %d provided buffers of %d B)\n", o.port, mode,
		NBUFS, o.bufsize);
	struct stats s = { 0 };
	uint64_t rearms = 0, enobufs = 0;
	struct __kernel_timespec ts = { 0, 100000000 };
	for (;;) {
		struct io_uring_cqe *cqe;
		r = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
		unsigned got = 0, seen = 0, head;
		int need_arm = 0;
		if (r == 0) {
			io_uring_for_each_cqe(&ring, head, cqe) {
				seen++;
				if (cqe->res > 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
					unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
					account(&s, bufs + (size_t)bid * o.bufsize, cqe->res);
					io_uring_buf_ring_add(br, bufs + (size_t)bid * o.bufsize, o.bufsize, bid,
							      mask, got);
					got++;
				} else if (cqe->res == -ENOBUFS) {
					enobufs++;
				} else if (cqe->res < 0 && cqe->res != -EINTR && cqe->res != -EAGAIN) {
					fprintf(stderr, "recv: %s\n", strerror(-cqe->res));
					return 1;
				}
				if (!(cqe->flags & IORING_CQE_F_MORE))
					need_arm = 1;
				if (seen >= (unsigned)o.batch * 16)
					break;
			}
			io_uring_buf_ring_advance(br, got);
			io_uring_cq_advance(&ring, seen);
		} else if (r != -ETIME && r != -EINTR) {
			fprintf(stderr, "wait: %s\n", strerror(-r));
			return 1;
		}
		if (need_arm) {
			rearms++;
			arm(&ring, fd);
		}
		if (batch_done(&s, &o, got))
			break;
	}
	report("uring", &s);
	fprintf(stderr, "uring: %llu re-arms, %llu ENOBUFS\n", (unsigned long long)rearms,
		(unsigned long long)enobufs);
	return 0;
}
