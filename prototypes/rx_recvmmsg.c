/* Baseline: a plain blocking recvmmsg loop, batch 64, into fixed buffers (wirespeed's path today,
 * without the ring, ledger and writer). */
#include "common.h"
#include <sys/socket.h>

int main(int argc, char **argv)
{
	struct opts o;
	parse_opts(argc, argv, &o);
	install_signals();
	int fd = udp_socket(&o);
	unsigned n = o.batch;
	unsigned char *buf = aligned_alloc(4096, (size_t)n * o.bufsize);
	struct mmsghdr *msgs = calloc(n, sizeof(*msgs));
	struct iovec *iov = calloc(n, sizeof(*iov));
	for (unsigned i = 0; i < n; i++) {
		iov[i].iov_base = buf + (size_t)i * o.bufsize;
		iov[i].iov_len = o.bufsize;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	struct stats s = { 0 };
	fprintf(stderr, "recvmmsg: listening on port %d, batch %u\n", o.port, n);
	for (;;) {
		int got = recvmmsg(fd, msgs, n, MSG_WAITFORONE, NULL);
		if (got < 0) {
			if (errno != EAGAIN && errno != EINTR) {
				perror("recvmmsg");
				return 1;
			}
			got = 0;
		}
		for (int i = 0; i < got; i++)
			account(&s, iov[i].iov_base, msgs[i].msg_len);
		if (batch_done(&s, &o, got))
			break;
	}
	report("recvmmsg", &s);
	return 0;
}
