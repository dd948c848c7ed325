/* Commands: forking a fresh bash, feeding stdin, collecting output, timeouts, reaping; spawned processes. */
#include "evsysd.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int env_key_ok(const value_t *k)
{
    return k->t == V_STR && k->len > 0 && strlen(k->s) == k->len && !strchr(k->s, '=');
}

void req_from(req_t *r, const value_t *v)
{
    memset(r, 0, sizeof *r);
    const char *cmd = d_str(v, "cmd"), *cwd = d_str(v, "cwd"), *user = d_str(v, "user");
    r->cmd = xstrdup(cmd ? cmd : "");
    r->cwd = xstrdup(cwd && *cwd ? cwd : "/");
    r->root = user && strcmp(user, "root") == 0;
    r->timeout = d_num(v, "timeout", 0);
    r->stdin = d_true(v, "stdin");
    long long cap = d_int(v, "max_output", 0);
    r->max_output = cap >= 2 ? (size_t)cap : DEFAULT_MAX_OUTPUT;
    r->verifier = d_int(v, "verifier", 0);
    r->since = d_num(v, "since", 0);
    const char *output = d_str(v, "output");
    r->output = output ? xstrdup(output) : NULL;
    value_t *env = d_get(v, "env");
    size_t n = env && env->t == V_DICT ? env->n : 0, m = 0;
    r->envp = xmalloc((n + 1) * sizeof *r->envp);
    for (size_t k = 0; k < n; k++) {
        value_t *key = env->items[2 * k], *val = env->items[2 * k + 1];
        if (!env_key_ok(key) || val->t != V_STR)
            continue;
        char *kv = xmalloc(key->len + val->len + 2);
        sprintf(kv, "%s=%s", key->s, val->s);
        r->envp[m++] = kv;
    }
    r->envp[m] = NULL;
}

void req_free(req_t *r)
{
    free(r->cmd);
    free(r->cwd);
    free(r->output);
    for (char **p = r->envp; p && *p; p++)
        free(*p);
    free(r->envp);
    for (char **p = r->argv; p && *p; p++)
        free(*p);
    free(r->argv);
}

command_t *command_new(long long rid)
{
    command_t *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->rid = rid;
    c->out_fd = c->err_fd = c->stdin_fd = -1;
    return c;
}

void command_free(command_t *c)
{
    req_free(&c->req);
    buf_free(&c->out);
    buf_free(&c->err);
    buf_free(&c->in);
    free(c->cap[0].ring);
    free(c->cap[1].ring);
    free(c->job);
    free(c);
}

/* register a started command: its output pipes and its deadline */
void track(command_t *c)
{
    c->next = commands;
    commands = c;
    if (c->out_fd >= 0) /* fast commands write to their worker's pipes */
        watch(c->out_fd, W_PIPE, c, EPOLLIN);
    if (c->err_fd >= 0)
        watch(c->err_fd, W_PIPE, c, EPOLLIN);
    if (c->req.timeout > 0)
        c->deadline = now_mono() + c->req.timeout;
}

void untrack(command_t *c)
{
    for (command_t **p = &commands; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            return;
        }
}

int is_tracked(const command_t *c)
{
    for (command_t *x = commands; x; x = x->next)
        if (x == c)
            return 1;
    return 0;
}

static void exec_on_path(char **argv, char **envp);

void exec_child(const req_t *r, int in_fd, int out_fd, int err_fd, char **argv)
{
    char msg[600];
    setsid();
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0 || (r->fd3 > 0 && dup2(r->fd3, 3) < 0))
        _exit(127);
    if (join_scope(r->verifier > 0) != 0) { /* never run outside the scope's limits */
        dprintf(2, "evsys: cannot start command: cannot join its cgroup: %s\n", strerror(errno));
        _exit(127);
    }
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "0", 1) < 0) { /* best effort */ }
        close(fd);
    }
    if (r->verifier > 0 && verifier_enter(r) != 0) /* its own mounts: verifier.c */
        _exit(126);
    char **envp = r->verifier > 0 ? verifier_env(r->envp) : r->envp;
    if (!r->root && r->verifier > 0)
        prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0); /* the mark outlives setuid (mark_caps) */
    if (!r->root && (setgroups(0, NULL) != 0 || setgid(AGENT_UID) != 0 || setuid(AGENT_UID) != 0)) {
        dprintf(2, "evsys: cannot start command: cannot drop to the agent user: %s\n", strerror(errno));
        _exit(127);
    }
    mark_caps(r->verifier > 0, r->root);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (chdir(r->cwd) != 0) {
        snprintf(msg, sizeof msg, "evsys: cannot enter working directory '%.400s': %s\n", r->cwd, strerror(errno));
        if (write(2, msg, strlen(msg)) < 0) { /* nothing more to do */ }
        _exit(126);
    }
    if (r->output) {
        int out = open(r->output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (out < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) {
            dprintf(2, "evsys: cannot open output file '%.400s': %s\n", r->output, strerror(errno));
            _exit(126);
        }
    }
    if (r->direct)
        exec_on_path(argv, envp);
    else
        execve("/bin/bash", argv, envp);
    dprintf(2, "evsys: cannot start %s: %s\n", r->direct ? argv[0] : "command", strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

/* execve argv[0], searched on the PATH of envp when it has no slash (as a shell would: an empty entry, leading,
 * trailing or between two colons, is the current directory) */
static void exec_on_path(char **argv, char **envp)
{
    const char *path = DEFAULT_PATH;
    for (char **e = envp; *e; e++)
        if (!strncmp(*e, "PATH=", 5))
            path = *e + 5;
    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, envp);
        return;
    }
    char full[4096];
    int saved = ENOENT;
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len)
            snprintf(full, sizeof full, "%.*s/%s", (int)len, p, argv[0]);
        else
            snprintf(full, sizeof full, "./%s", argv[0]);
        execve(full, argv, envp);
        if (errno != ENOENT && errno != ENOTDIR)
            saved = errno;
        if (!end)
            break;
        p = end;
    }
    errno = saved;
}

static int nonblocking_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    fcntl(fds[0], F_SETFL, O_NONBLOCK); /* our read end only; the command's end stays blocking */
    return 0;
}

/* fork a fresh `bash -c` for the command with its own pipes; NULL (errno set) on failure */
command_t *start_forked(command_t *c, const char *payload, size_t plen)
{
    int out[2], err[2], in[2] = {devnull_fd, -1};
    if (nonblocking_pipe(out) != 0)
        return NULL;
    if (nonblocking_pipe(err) != 0) {
        close(out[0]), close(out[1]);
        return NULL;
    }
    if (c->req.stdin && pipe2(in, O_CLOEXEC) != 0) {
        close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        return NULL;
    }
    size_t tail = 0;
    while (c->req.argv && c->req.argv[tail])
        tail++;
    char **argv = xmalloc((tail + 4) * sizeof *argv);
    size_t head = c->req.direct ? 0 : 3;
    argv[0] = "bash", argv[1] = "-c", argv[2] = c->req.cmd;
    for (size_t k = 0; k < tail; k++)
        argv[head + k] = c->req.argv[k];
    argv[head + tail] = NULL;
    pid_t pid = fork();
    if (pid == 0)
        exec_child(&c->req, in[0], out[1], err[1], argv);
    int saved = errno;
    free(argv);
    close(out[1]), close(err[1]);
    if (in[0] != devnull_fd)
        close(in[0]);
    if (pid < 0) {
        close(out[0]), close(err[0]);
        if (in[1] >= 0)
            close(in[1]);
        errno = saved;
        return NULL;
    }
    c->pid = pid;
    c->out_fd = out[0];
    c->err_fd = err[0];
    track(c);
    if (in[1] >= 0) {
        c->stdin_fd = in[1];
        fcntl(in[1], F_SETFL, O_NONBLOCK);
        buf_add(&c->in, payload, plen);
        watch(in[1], W_STDIN, c, EPOLLOUT);
    }
    return c;
}

/* an exec request's "argv" (run with no shell): copied into the request; 0 when it is malformed */
static int direct_argv(req_t *r, const value_t *v)
{
    value_t *argv = d_get(v, "argv");
    if (!argv || argv->t == V_NONE)
        return 1;
    if (argv->t != V_LIST || argv->n == 0)
        return 0;
    for (size_t k = 0; k < argv->n; k++)
        if (argv->items[k]->t != V_STR || (k == 0 && argv->items[k]->len == 0))
            return 0;
    r->argv = xmalloc((argv->n + 1) * sizeof *r->argv);
    for (size_t k = 0; k < argv->n; k++)
        r->argv[k] = xstrdup(argv->items[k]->s);
    r->argv[argv->n] = NULL;
    r->direct = 1;
    return 1;
}

void start_exec(const value_t *v, long long rid, const char *payload, size_t plen)
{
    command_t *c = command_new(rid);
    req_from(&c->req, v);
    if (!direct_argv(&c->req, v)) {
        command_free(c);
        send_error(rid, 1, "exec argv must be a non-empty list of strings");
        return;
    }
    struct stat st; /* a missing cwd: the forked path reports it with the reason */
    int cwd_ok = stat(c->req.cwd, &st) == 0 && S_ISDIR(st.st_mode);
    int plain = !c->req.direct && !c->req.output; /* the other paths run a shell command, output to pipes */
    if (c->req.verifier > 0) { /* a verification run: the payload is the tests (verifier.c), forked */
        c->req.stdin = 0;
        if (verifier_prepare(payload, plen) == 0) {
            command_t *started = start_forked(c, "", 0);
            verifier_started();
            if (started)
                return;
        }
    } else if (cwd_ok && plain && (run_fast(c) || (!c->req.stdin && run_on_worker(c)))) {
        return;
    }
    if (c->req.verifier > 0 || !start_forked(c, payload, plen)) {
        char msg[300];
        snprintf(msg, sizeof msg, "exec failed: %s", strerror(errno));
        command_free(c);
        send_error(rid, 1, msg);
    }
}

void send_output(command_t *c, int stream)
{
    buf_t *b = stream == 1 ? &c->out : &c->err;
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", "out");
    m_kint(&h, "id", c->rid);
    m_kint(&h, "fd", stream);
    m_end(&h);
    send_frame(&h, b->p, b->n);
    buf_free(&h);
    b->n = 0;
}

static void close_output(command_t *c, int fd)
{
    unwatch(fd);
    close(fd);
    if (fd == c->out_fd)
        c->out_fd = -1;
    else
        c->err_fd = -1;
}

/* keep the last `cap` bytes written to the ring */
static void ring_add(capture_t *k, size_t cap, const char *data, size_t n)
{
    if (!k->ring)
        k->ring = xmalloc(cap);
    if (n > cap)
        data += n - cap, n = cap;
    size_t first = cap - k->ring_pos < n ? cap - k->ring_pos : n;
    memcpy(k->ring + k->ring_pos, data, first);
    memcpy(k->ring, data + first, n - first);
    k->ring_pos = (k->ring_pos + n) % cap;
    k->ring_len = k->ring_len + n > cap ? cap : k->ring_len + n;
}

/* the ring's bytes, oldest first, appended to `b` */
static void ring_flush(capture_t *k, size_t cap, buf_t *b)
{
    if (k->ring_len < cap) {
        buf_add(b, k->ring, k->ring_len);
        return;
    }
    buf_add(b, k->ring + k->ring_pos, cap - k->ring_pos);
    buf_add(b, k->ring, k->ring_pos);
}

/* output of a command's stream (1 or 2): a spawned process's goes to the host at once; a command's head is
 * buffered and streamed past CHUNK, and what comes after the head only replaces the oldest bytes of the tail */
void take_output(command_t *c, int stream, const char *data, size_t n)
{
    capture_t *k = &c->cap[stream - 1];
    buf_t *b = stream == 1 ? &c->out : &c->err;
    k->total += n;
    size_t head_cap = c->stream ? (size_t)-1 : c->req.max_output / 2;
    size_t take = head_cap - k->head < n ? head_cap - k->head : n;
    buf_add(b, data, take);
    k->head += take;
    if (take < n)
        ring_add(k, c->req.max_output - head_cap, data + take, n - take);
    if (b->n >= CHUNK || (c->stream && b->n))
        send_output(c, stream);
}

/* read what a command's pipe holds now */
void read_pipe(command_t *c, int fd)
{
    char chunk[CHUNK];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0)
        return;
    if (n == 0) {
        close_output(c, fd);
        return;
    }
    take_output(c, fd == c->out_fd ? 1 : 2, chunk, (size_t)n);
}

/* {"op": "pause" | "resume", "target", "fd": 1|2}: the host's buffer of a spawned process's stream is full (or
 * has room again); a paused pipe is not read, so the process blocks writing to it, as with any full pipe */
void flow_op(const value_t *v)
{
    command_t *c = find_command(d_int(v, "target", -1));
    int stream = (int)d_int(v, "fd", 0);
    if (!c || !c->stream || (stream != 1 && stream != 2))
        return;
    int fd = stream == 1 ? c->out_fd : c->err_fd;
    int pause = strcmp(d_str(v, "op"), "pause") == 0;
    c->cap[stream - 1].paused = pause;
    if (fd >= 0)
        watch_modify(fd, pause ? 0 : EPOLLIN);
}

void close_stdin(command_t *c)
{
    if (c->stdin_fd >= 0) {
        unwatch(c->stdin_fd);
        close(c->stdin_fd);
        c->stdin_fd = -1;
    }
}

/* feed stdin without blocking; when all is written wait for more (spawned) or close it (exec) */
void write_stdin(command_t *c)
{
    if (c->in.n) {
        ssize_t n = write(c->stdin_fd, c->in.p, c->in.n < CHUNK ? c->in.n : CHUNK);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n < 0)
            c->in.n = 0; /* the reader is gone */
        else
            buf_consume(&c->in, (size_t)n);
    }
    if (c->in.n)
        return;
    if (c->stream && !c->eof)
        watch_modify(c->stdin_fd, 0);
    else
        close_stdin(c);
}

static void drain(command_t *c, int stream, int fd)
{
    char chunk[CHUNK];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0)
        take_output(c, stream, chunk, (size_t)n);
}

/* the exit frame's account of a stream: bytes written, and how many of them lead the reply (the head) */
static void account(buf_t *h, command_t *c, int stream)
{
    capture_t *k = &c->cap[stream - 1];
    m_kint(h, stream == 1 ? "out_total" : "err_total", (long long)k->total);
    m_kint(h, stream == 1 ? "out_head" : "err_head", (long long)k->head);
    if (k->ring_len)
        ring_flush(k, c->req.max_output - c->req.max_output / 2, stream == 1 ? &c->out : &c->err);
}

/* the command's main process exited: drain what its pipes hold, report, forget it */
void finish(command_t *c, int code)
{
    if (c->out_fd >= 0) {
        drain(c, 1, c->out_fd);
        close_output(c, c->out_fd);
    }
    if (c->err_fd >= 0) {
        drain(c, 2, c->err_fd);
        close_output(c, c->err_fd);
    }
    if (c->job)
        job_cleanup(c->job);
    close_stdin(c);
    untrack(c);
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", "exit");
    m_kint(&h, "id", c->rid);
    m_kint(&h, "code", code);
    m_kbool(&h, "timed_out", c->timed_out);
    account(&h, c, 1);
    account(&h, c, 2);
    m_kint(&h, "out", (long long)c->out.n);
    m_kint(&h, "free", (long long)free_bytes("/"));
    m_end(&h);
    buf_add(&c->out, c->err.p, c->err.n);
    send_frame(&h, c->out.p, c->out.n);
    buf_free(&h);
    command_free(c);
}

static command_t *forked_by_pid(pid_t pid)
{
    for (command_t *c = commands; c; c = c->next)
        if (c->pid == pid && !c->worker)
            return c;
    return NULL;
}

/* collect every exited child (commands, and orphans reparented to us); finish the forked commands */
void reap(void)
{
    sigfd_drain();
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return;
        command_t *c = forked_by_pid(pid);
        if (c)
            finish(c, WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
    }
}

double next_deadline(void)
{
    double best = 0;
    for (command_t *c = commands; c; c = c->next)
        if (c->deadline > 0 && !c->timed_out && (best == 0 || c->deadline < best))
            best = c->deadline;
    return best;
}

/* kill the process group of every command whose deadline passed */
void expire(void)
{
    double now = now_mono();
again:
    for (command_t *c = commands; c; c = c->next)
        if (c->deadline > 0 && !c->timed_out && c->deadline <= now) {
            c->timed_out = 1;
            if (c->queued) { /* never started: it ends here, which changes the list */
                fast_drop(c);
                goto again;
            }
            kill_job(c, 0); /* a worker job whose pid is not known yet is killed when it is */
        }
}

/* a tracked command that could not run where it was meant to: run it on the normal path now */
void run_forked_now(command_t *c)
{
    untrack(c);
    c->worker = NULL, c->pid = 0, c->deadline = 0;
    if (run_on_worker(c) || start_forked(c, "", 0))
        return;
    char msg[300];
    snprintf(msg, sizeof msg, "exec failed: %s", strerror(errno));
    send_error(c->rid, 1, msg);
    command_free(c);
}
