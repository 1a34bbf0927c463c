/*
 * bare_recv: the floor reference for recv_max.py.
 *
 * A bare recvmmsg loop with no accounting: it only counts datagrams whose length equals
 * --size (others, such as the 80-byte end-of-stream messages of `wirespeed send`, are
 * ignored). Whatever rate this loop cannot sustain without loss, no receiver built on plain
 * recvmmsg can either; whatever it can, a receiver that loses there pays for its own work.
 *
 *   bare_recv --port P --size N [--bind ADDR] [--cpu C] [--idle-ms 1000]
 *
 * SO_RCVBUF 32 MiB (SO_RCVBUFFORCE when permitted), batches of 64, MSG_WAITFORONE.
 * Stops after --idle-ms without a datagram once at least one has arrived, or on
 * SIGTERM/SIGINT. Prints one JSON line on stdout:
 *   {"received":N,"bytes":B,"first_to_last_s":T,"ignored":I,"rcvbuf":G,"stopped_by":"idle"}
 * and on stderr, once the socket is bound: "listening on ADDR:PORT (rcvbuf granted G)".
 *
 * Build: gcc -O2 -Wall -o bare_recv bare_recv.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define BUF_LEN 65536 /* any UDP/IPv4 datagram fits: longer-than-size ones are seen as such */
#define RCVBUF (32 << 20)

static volatile sig_atomic_t stop_signal = 0;

static void on_signal(int sig) { stop_signal = sig; }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s --port P --size N [--bind ADDR] [--cpu C] [--idle-ms 1000]\n", argv0);
    exit(2);
}

static long parse_long(const char *s, const char *what, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "bare_recv: bad %s '%s' (%ld..%ld)\n", what, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    long port = -1, size = -1, cpu = -1, idle_ms = 1000;
    const char *bind_addr = "0.0.0.0";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) usage(argv[0]);
        if (!strcmp(a, "--port")) port = parse_long(argv[++i], "port", 1, 65535);
        else if (!strcmp(a, "--size")) size = parse_long(argv[++i], "size", 1, 65507);
        else if (!strcmp(a, "--bind")) bind_addr = argv[++i];
        else if (!strcmp(a, "--cpu")) cpu = parse_long(argv[++i], "cpu", 0, CPU_SETSIZE - 1);
        else if (!strcmp(a, "--idle-ms")) idle_ms = parse_long(argv[++i], "idle-ms", 1, 3600000);
        else usage(argv[0]);
    }
    if (port < 0 || size < 0) usage(argv[0]);

    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int)cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            fprintf(stderr, "bare_recv: cannot pin to CPU %ld: %s\n", cpu, strerror(errno));
            return 1;
        }
    }

    /* No SA_RESTART: a blocked recvmmsg returns EINTR and the loop sees the flag. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("bare_recv: socket");
        return 1;
    }
    int want = RCVBUF;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof want) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
    int granted = 0;
    socklen_t glen = sizeof granted;
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &granted, &glen);

    /* Wake up regularly so that the idle timeout is checked even when nothing arrives. */
    long tick_ms = idle_ms < 100 ? idle_ms : 100;
    struct timeval tv = {.tv_sec = tick_ms / 1000, .tv_usec = (tick_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, bind_addr, &sin.sin_addr) != 1) {
        fprintf(stderr, "bare_recv: bad IPv4 address '%s'\n", bind_addr);
        return 2;
    }
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) != 0) {
        fprintf(stderr, "bare_recv: bind %s:%ld: %s\n", bind_addr, port, strerror(errno));
        return 1;
    }
    fprintf(stderr, "listening on %s:%ld (rcvbuf granted %d)\n", bind_addr, port, granted);
    fflush(stderr);

    char *bufs = malloc((size_t)BATCH * BUF_LEN);
    if (!bufs) {
        perror("bare_recv: malloc");
        return 1;
    }
    struct mmsghdr msgs[BATCH];
    struct iovec iovs[BATCH];
    for (int i = 0; i < BATCH; i++) {
        iovs[i].iov_base = bufs + (size_t)i * BUF_LEN;
        iovs[i].iov_len = BUF_LEN;
    }

    uint64_t received = 0, bytes = 0, ignored = 0, first_ns = 0, last_ns = 0;
    const uint64_t idle_ns = (uint64_t)idle_ms * 1000000ull;
    const char *stopped_by = "idle";
    for (;;) {
        if (stop_signal) {
            stopped_by = stop_signal == SIGTERM ? "SIGTERM" : "SIGINT";
            break;
        }
        for (int i = 0; i < BATCH; i++) {
            memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
            msgs[i].msg_hdr.msg_iov = &iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int n = recvmmsg(fd, msgs, BATCH, MSG_WAITFORONE, NULL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                if (received > 0 && now_ns() - last_ns >= idle_ns) break;
                continue;
            }
            perror("bare_recv: recvmmsg");
            return 1;
        }
        uint64_t t = now_ns();
        int good = 0;
        for (int i = 0; i < n; i++) {
            if (msgs[i].msg_len == (unsigned)size && !(msgs[i].msg_hdr.msg_flags & MSG_TRUNC)) good++;
            else ignored++;
        }
        if (good) {
            if (received == 0) first_ns = t;
            received += (uint64_t)good;
            bytes += (uint64_t)good * (uint64_t)size;
            last_ns = t;
        } else if (received > 0 && t - last_ns >= idle_ns) {
            break;
        }
    }
    double span = received ? (double)(last_ns - first_ns) / 1e9 : 0.0;
    printf("{\"received\":%llu,\"bytes\":%llu,\"first_to_last_s\":%.9f,\"ignored\":%llu,\"rcvbuf\":%d,"
           "\"stopped_by\":\"%s\"}\n",
           (unsigned long long)received, (unsigned long long)bytes, span, (unsigned long long)ignored, granted,
           stopped_by);
    return 0;
}
