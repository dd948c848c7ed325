/* evsysd's entry point, event loop, framing and request dispatch.
 *
 * Requests:  {"op": "exec", "id", "cmd", "cwd", "env", "user", "timeout", "stdin": bool, "max_output": bytes,
 *              "verifier": bytes}  payload = stdin; of each output stream the first and last max_output/2 bytes
 *              are kept; with "verifier", a verification run in private mounts (verifier.c), payload = the tests
 *            {"op": "spawn", "id", "argv", "cwd", "env", "user", "timeout"}  payload = initial stdin
 *            {"op": "write"|"eof", "target"}  payload = more stdin for a spawned process
 *            {"op": "signal", "target", "sig", "tree"}
 *            {"op": "pause"|"resume", "target", "fd": 1|2}  stop/restart reading a spawned process's stream
 *            {"op": "kill", "id"}  kill every process in the sandbox except the daemon
 *            {"op": "ping", "id"}
 *            {"op": "files" | "pack" | "read", ...}: placing, copying and reading files without a process
 *            (files.c, pack.c)
 * Replies:   {"op": "out", "id", "fd": 1|2}  payload = a chunk of output (large outputs and spawned processes)
 *            {"op": "exit", "id", "code", "timed_out", "out_total", "out_head", "err_total", "err_head",
 *              "out": n, "free": bytes}  payload = rest of stdout ([:n]) + rest of stderr; a stream whose total
 *              exceeds what arrived lost its middle, after its first `*_head` bytes
 *            {"op": "started", "id", "pid"}, {"op": "killed", "id", "count", "left"}, {"op": "pong", "id"},
 *            {"op": "error", "id", "message"}, and once at start {"op": "ready", "pid", "limits",
 *              "oom_score_adj", "coredump_filter", "autogroup"}: what this process passes on to every command
 *              as it starts (its rlimits "soft hard" by resource number, comma-separated, -1 for unlimited;
 *              three /proc/self files, "" when absent), which a reset puts back (inherited.c)
 * The daemon is the pid namespace's init (bwrap --as-pid-1): nothing inside can kill it, and it reaps every
 * child and orphan (SIGCHLD through a signalfd). Timeouts are the epoll timeout, never polled. */
#include "evsysd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <unistd.h>

#define MAX_FD 65536

typedef struct {
    int kind;
    uint32_t gen;
    void *obj;
} watch_t;

static watch_t watches[MAX_FD];
static uint32_t next_gen = 1;
static int epfd = -1, rfd = -1, wfd = -1, sigfd = -1;
static buf_t inbuf;
command_t *commands;
int devnull_fd = -1;
uid_t agent_uid = LAYER_AGENT_UID;

void watch(int fd, int kind, void *obj, uint32_t events)
{
    if (fd < 0 || fd >= MAX_FD)
        die("file descriptor out of range");
    watches[fd] = (watch_t){kind, next_gen++, obj};
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)watches[fd].gen << 32 | (uint32_t)fd};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        die("epoll_ctl add failed");
}

void watch_modify(int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)watches[fd].gen << 32 | (uint32_t)fd};
    epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
}

void unwatch(int fd)
{
    epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
    watches[fd] = (watch_t){0, 0, NULL};
}

static void write_all(const struct iovec *iov_in, int n)
{
    struct iovec iov[3];
    memcpy(iov, iov_in, n * sizeof *iov);
    int k = 0;
    while (k < n) {
        ssize_t w = writev(wfd, iov + k, n - k);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            _exit(0); /* the host went away */
        }
        while (k < n && (size_t)w >= iov[k].iov_len) {
            w -= iov[k].iov_len;
            k++;
        }
        if (k < n) {
            iov[k].iov_base = (char *)iov[k].iov_base + w;
            iov[k].iov_len -= w;
        }
    }
}

static void put_u64(unsigned char *d, uint64_t v)
{
    for (int k = 7; k >= 0; k--, v >>= 8)
        d[k] = (unsigned char)v;
}

static uint64_t get_u64(const unsigned char *s)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = v << 8 | s[k];
    return v;
}

/* a frame: "!QQ" (header length, payload length: 64 bits each, so no payload size can wrap), header, payload */
void send_frame(buf_t *header, const void *payload, size_t plen)
{
    unsigned char lens[FRAME_PREFIX];
    put_u64(lens, header->n);
    put_u64(lens + 8, plen);
    struct iovec iov[3] = {{lens, FRAME_PREFIX}, {header->p, header->n}, {(void *)payload, plen}};
    write_all(iov, plen ? 3 : 2);
}

void send_error(long long rid, int has_id, const char *message)
{
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", "error");
    if (has_id)
        m_kint(&h, "id", rid);
    else
        m_knone(&h, "id");
    m_kstr(&h, "message", message);
    m_end(&h);
    send_frame(&h, NULL, 0);
    buf_free(&h);
}

static void send_simple(const char *op, long long rid, const char *key, long long value)
{
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", op);
    m_kint(&h, "id", rid);
    if (key)
        m_kint(&h, key, value);
    m_end(&h);
    send_frame(&h, NULL, 0);
    buf_free(&h);
}

void sigfd_drain(void)
{
    struct signalfd_siginfo si;
    while (read(sigfd, &si, sizeof si) > 0) {
    }
}

command_t *find_command(long long rid)
{
    for (command_t *c = commands; c; c = c->next)
        if (c->rid == rid)
            return c;
    return NULL;
}

static void kill_op(long long rid)
{
    int left = 0, count = kill_all(&left);
    verifier_drop(); /* a reset or a killed trial: the last verification's logs are no one's any more */
    retire_all(); /* killed too; their commands end as killed */
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", "killed");
    m_kint(&h, "id", rid);
    m_kint(&h, "count", count);
    m_kint(&h, "left", left);
    m_end(&h);
    send_frame(&h, NULL, 0);
    buf_free(&h);
}

static void dispatch(const value_t *v, const char *payload, size_t plen)
{
    const char *op = d_str(v, "op");
    value_t *idv = d_get(v, "id");
    int has_id = idv && idv->t == V_INT;
    long long rid = has_id ? idv->i : 0;
    char msg[512];
    errno = 0;
    if (!op) {
        send_error(rid, has_id, "request has no op");
    } else if (strcmp(op, "exec") == 0) {
        start_exec(v, rid, payload, plen);
    } else if (strcmp(op, "spawn") == 0) {
        spawn_op(v, rid, payload, plen);
    } else if (strcmp(op, "write") == 0 || strcmp(op, "eof") == 0) {
        feed_op(v, payload, plen);
    } else if (strcmp(op, "signal") == 0) {
        signal_op(v);
    } else if (strcmp(op, "pause") == 0 || strcmp(op, "resume") == 0) {
        flow_op(v);
    } else if (strcmp(op, "files") == 0) {
        files_op(v, rid, payload, plen);
    } else if (strcmp(op, "pack") == 0) {
        pack_op(v, rid);
    } else if (strcmp(op, "read") == 0) {
        read_op(v, rid);
    } else if (strcmp(op, "ping") == 0) {
        send_simple("pong", rid, NULL, 0);
    } else if (strcmp(op, "kill") == 0) {
        kill_op(rid);
    } else {
        snprintf(msg, sizeof msg, "unknown op '%.100s'", op);
        send_error(rid, has_id, msg);
    }
}

/* read request bytes and dispatch every complete frame; 0 when the host closed our stdin */
static int read_host(void)
{
    char chunk[CHUNK];
    ssize_t n = read(rfd, chunk, sizeof chunk);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN;
    if (n == 0)
        return 0;
    buf_add(&inbuf, chunk, (size_t)n);
    size_t off = 0;
    while (inbuf.n - off >= FRAME_PREFIX) {
        const unsigned char *p = (const unsigned char *)inbuf.p + off;
        uint64_t hlen = get_u64(p), plen = get_u64(p + 8);
        if (hlen > MAX_HEADER || plen > SIZE_MAX / 2)
            die("oversize request frame");
        if (inbuf.n - off - FRAME_PREFIX < hlen + plen)
            break;
        value_t *v = m_parse((const char *)p + FRAME_PREFIX, hlen);
        if (!v)
            die("malformed request header");
        dispatch(v, (const char *)p + FRAME_PREFIX + hlen, plen);
        m_free(v);
        off += FRAME_PREFIX + hlen + plen;
    }
    buf_consume(&inbuf, off);
    return 1;
}

static void serve(void)
{
    struct epoll_event evs[64];
    watch(rfd, W_HOST, NULL, EPOLLIN);
    watch(sigfd, W_SIGNAL, NULL, EPOLLIN);
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", "ready");
    m_kint(&h, "pid", getpid());
    add_inherited_state(&h);
    m_end(&h);
    send_frame(&h, NULL, 0);
    buf_free(&h);
    for (;;) {
        double deadline = next_deadline();
        int timeout = -1;
        if (deadline > 0) {
            double left = deadline - now_mono();
            timeout = left <= 0 ? 0 : (int)(left * 1000) + 1;
        }
        int n = epoll_wait(epfd, evs, 64, timeout);
        if (n < 0 && errno != EINTR)
            die("epoll_wait failed");
        for (int k = 0; k < n; k++) {
            int fd = (int)(uint32_t)evs[k].data.u64;
            uint32_t gen = (uint32_t)(evs[k].data.u64 >> 32);
            if (watches[fd].gen != gen) /* closed (and maybe reused) earlier in this batch */
                continue;
            switch (watches[fd].kind) {
            case W_HOST:
                if (!read_host())
                    return;
                break;
            case W_SIGNAL: reap(); break;
            case W_WORKER: worker_output(watches[fd].obj); break;
            case W_PIPE: read_pipe(watches[fd].obj, fd); break;
            case W_STDIN: write_stdin(watches[fd].obj); break;
            case W_FAST_OUT: fast_output(watches[fd].obj, fd); break;
            }
        }
        expire();
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--setup") == 0) /* on the host, before bwrap: see setup.c */
        return setup_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--reset") == 0) /* on the host, between two trials: see reset.c */
        return reset_main(argc, argv);
    if (argc > 1) { /* the agent's uid in this sandbox: never root */
        char *end;
        unsigned long uid = strtoul(argv[1], &end, 10);
        if (*end || end == argv[1] || uid == 0 || uid >= 0xffffffffUL)
            die("the agent uid must be a positive number");
        agent_uid = (uid_t)uid;
    }
    if (argc > 2) /* the cgroup files of its children's scopes (cgsetup.py) */
        cgroup_scopes(argv[2]);
    harden();
    rfd = fcntl(0, F_DUPFD_CLOEXEC, 3);
    wfd = fcntl(1, F_DUPFD_CLOEXEC, 3);
    devnull_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (rfd < 0 || wfd < 0 || devnull_fd < 0)
        die("cannot set up the host channel");
    dup2(devnull_fd, 0);
    dup2(devnull_fd, 1);
    signal(SIGPIPE, SIG_IGN);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sigfd < 0 || epfd < 0)
        die("cannot create the event loop");
    prepare_job_dir();
    serve();
    return 0;
}
