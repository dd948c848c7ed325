/* evsysd: the exec daemon that runs as pid 1 inside every evsys local sandbox (see docs/sandbox.md).
 *
 * It talks to the host over its stdin/stdout with frames of "!QQ" (header_len, payload_len) + a header dict in
 * Python's marshal format (version 4, the subset of marshal.c in this directory) + raw payload bytes. Requests
 * and replies are listed in main.c. Built by evsys.sandbox.local.native with the system C compiler, statically. */
#ifndef EVSYSD_H
#define EVSYSD_H

#define _GNU_SOURCE
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The agent's uid: its own per sandbox, given on the daemon's command line (evsys.sandbox.local.uids); the
 * cached layers store the agent's files as LAYER_AGENT_UID, which idmapped mounts show as that uid (idmap.c). */
#define LAYER_AGENT_UID 1000
extern uid_t agent_uid;
#define AGENT_UID agent_uid
#define CHUNK 65536
#define JOB_DIR "/.evsys/jobs"
#define MAX_WORKERS_PER_USER 64
#define DEFAULT_MAX_OUTPUT (4u << 20) /* bytes kept per stream of a command: a head and a tail half */
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" /* a request without PATH */
#define FRAME_PREFIX 16           /* "!QQ": header length, payload length */
#define MAX_HEADER (16u << 20)    /* a request header larger than this is a broken host */

/* ---- byte buffers (util.c) */
typedef struct {
    char *p;
    size_t n, cap;
} buf_t;
void buf_add(buf_t *b, const void *data, size_t n);
void buf_addstr(buf_t *b, const char *s);
void buf_consume(buf_t *b, size_t n);
void buf_free(buf_t *b);
void *xmalloc(size_t n);
char *xstrdup(const char *s);
double now_mono(void);
DIR *dir_at(int dirfd, const char *name, int flags); /* flags: extra open flags (O_NOFOLLOW); NULL + errno */
struct dirent *next_entry(DIR *d);                  /* the next entry other than "." and "..", or NULL */
void die(const char *what);

/* ---- marshal values (marshal.c) */
typedef enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_BYTES, V_LIST, V_DICT } vtype_t;
typedef struct value {
    vtype_t t;
    long long i;
    double f;
    char *s; /* V_STR: file-system bytes (surrogate escapes undone), NUL-terminated; V_BYTES too */
    size_t len;
    struct value **items; /* V_LIST: n items; V_DICT: 2n items, key then value */
    size_t n;
} value_t;
value_t *m_parse(const char *data, size_t len); /* NULL when malformed */
void m_free(value_t *v);
value_t *d_get(const value_t *dict, const char *key);
const char *d_str(const value_t *dict, const char *key); /* NULL unless a string */
long long d_int(const value_t *dict, const char *key, long long dflt);
int d_true(const value_t *dict, const char *key);
double d_num(const value_t *dict, const char *key, double dflt); /* dflt for None or missing */

/* a reply header under construction: m_begin, then key/value pairs, then m_end */
void m_begin(buf_t *b);
void m_kint(buf_t *b, const char *key, long long v);
void m_kbool(buf_t *b, const char *key, int v);
void m_kstr(buf_t *b, const char *key, const char *s);
void m_knone(buf_t *b, const char *key);
void m_end(buf_t *b);

/* ---- a request's fields a command needs after dispatch (exec.c) */
typedef struct {
    char *cmd, *cwd;
    int root;      /* run as root (else the agent user) */
    char **envp;   /* "K=V" strings, NULL-terminated */
    char **argv;   /* bash argv tail after -c CMD (spawn), NULL-terminated, or NULL */
    double timeout; /* seconds; <= 0: none */
    int stdin;
    int fd3; /* > 0: becomes fd 3 of the child (a fast worker's status pipe) */
    int direct;   /* argv is the program and its arguments (looked up on the request's PATH), no shell */
    char *output; /* stdout and stderr go to this file (created or truncated as the command's user) */
    size_t max_output; /* bytes of each stream kept: the first half and the last half (the middle is dropped) */
    long long verifier; /* > 0: a verification run in a mount namespace of its own, tmpfs of this many bytes */
    double since;       /* a verification run: when the sandbox's root was fresh (what the agent wrote is newer) */
} req_t;

/* one output stream of a command, bounded while it streams: the head goes to the host as it comes, the bytes
 * past it only into a ring of the last `max_output - head` bytes; `total` counts every byte (exec.c) */
typedef struct {
    unsigned long long total;
    size_t head;  /* bytes forwarded as the head so far */
    char *ring;   /* the tail, allocated on first overflow */
    size_t ring_len, ring_pos;
    int paused;   /* spawned processes: the host asked to stop reading (its buffer is full) */
} capture_t;

struct worker;
struct job;

typedef struct command {
    long long rid;
    pid_t pid;
    req_t req;
    int out_fd, err_fd, stdin_fd;
    buf_t out, err, in;
    capture_t cap[2]; /* stdout, stderr */
    int stream, eof, timed_out, queued;
    struct command *qnext; /* the next queued fast command */
    double deadline;
    struct job *job;
    struct worker *worker;
    struct command *next;
} command_t;

/* ---- the daemon's state and its event loop (main.c) */
enum { W_HOST = 1, W_SIGNAL, W_WORKER, W_PIPE, W_STDIN, W_FAST_OUT };
void watch(int fd, int kind, void *obj, uint32_t events);
void watch_modify(int fd, uint32_t events);
void unwatch(int fd);
void send_frame(buf_t *header, const void *payload, size_t plen);
void send_error(long long rid, int has_id, const char *message);
extern command_t *commands;
extern int devnull_fd;
command_t *find_command(long long rid);
void sigfd_drain(void);

/* ---- commands (exec.c) */
void req_from(req_t *r, const value_t *v);
void req_free(req_t *r);
command_t *command_new(long long rid);
void track(command_t *c);
void untrack(command_t *c);
int is_tracked(const command_t *c);
void command_free(command_t *c);
command_t *start_forked(command_t *c, const char *payload, size_t plen);
void start_exec(const value_t *v, long long rid, const char *payload, size_t plen);
void read_pipe(command_t *c, int fd);
void take_output(command_t *c, int stream, const char *data, size_t n);
void flow_op(const value_t *v);
void send_output(command_t *c, int stream);
void write_stdin(command_t *c);
void close_stdin(command_t *c);
void finish(command_t *c, int code);
void reap(void);
void expire(void);
double next_deadline(void);
void exec_child(const req_t *r, int in_fd, int out_fd, int err_fd, char **argv) __attribute__((noreturn));
void spawn_op(const value_t *v, long long rid, const char *payload, size_t plen);
void feed_op(const value_t *v, const char *payload, size_t plen);
void signal_op(const value_t *v);

/* ---- persistent bash workers (workers.c) */
typedef struct job {
    char name[64];
    char paths[3][128];
    int read_fds[2], hold_fds[2];
} job_t;
typedef struct worker {
    pid_t pid;
    int root;
    int cmd_fd, status_fd;
    buf_t buf;
    command_t *current;
    pid_t ready_pid;
    int idle;
    int fast, out_fd, err_fd; /* fast workers (fastpath.c): persistent output pipes */
    char *locale;             /* fast workers: the locale variables they were started with */
    struct worker *next;
} worker_t;
extern worker_t *workers;
void prepare_job_dir(void);
int run_on_worker(command_t *c); /* 1: submitted; 0: run it forked instead */
void worker_output(worker_t *w);
void kill_job(command_t *c, int orphaned);
void retire(worker_t *w);
void job_cleanup(job_t *j);
int worker_count(int root);
int is_worker(const worker_t *w);
char **locale_env(char **envp);
void run_forked_now(command_t *c);

/* ---- the fork-free path for builtin-only commands (fastpath.c) */
int fast_eligible(const char *cmd);
int run_fast(command_t *c);
void fast_output(worker_t *w, int fd);
void fast_done(worker_t *w, int status);
void fast_next(worker_t *w);
void fast_retire(worker_t *w);
void fast_drop(command_t *c);
void fast_drop_all(void);
void fast_orphans(int root);
void retire_all(void);

/* ---- file operations (files.c, pack.c) */
void files_op(const value_t *v, long long rid, const char *payload, size_t plen);
void pack_op(const value_t *v, long long rid);
void read_op(const value_t *v, long long rid);

/* ---- `evsysd --setup`: cgroups and mounts on the host before bwrap (setup.c) */
int setup_main(int argc, char **argv);

/* ---- idmapped clones of the lower layers: a ':'-list of /proc/self/fd/N paths in `out`; -1 + errno (idmap.c) */
int idmapped_lowers(const char *lowers, uid_t uid, char *out, size_t size);
int enter_owned_userns(uid_t owner);
/* the same with the mapping user namespace `ns` (an fd; -1: a new one, put in *made for the caller to keep) */
int idmapped_lowers_in(const char *lowers, uid_t uid, int ns, int *made, char *out, size_t size);

/* ---- the new mount API (mountapi.c) */
int sys_fsopen(const char *fs);
int sys_fsconfig(int fd, unsigned cmd, const char *key, const char *value);
int sys_fsconfig_fd(int fd, const char *key, int value); /* FSCONFIG_SET_FD */
int sys_fsmount(int fd, unsigned attrs);
int sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to, unsigned flags);
int make_readonly(const char *path); /* MOUNT_ATTR_RDONLY on the mount at path, nothing else, no recursion */
int detached(const char *fs, const char *options, unsigned attrs); /* a detached mount's fd, or -1 */

/* ---- the verifier's private places (verifier.c) */
#define VERIFIER_LOGS "/logs/verifier"
#define VERIFIER_TMPDIR "/tmp/.verifier-tmp" /* a verification run's TMPDIR: a tmpfs of its own, links followed */
extern int verifier_logs_fd; /* the root of the last verification run's private /logs/verifier, or -1 */
int verifier_prepare(const char *tar, size_t len); /* before forking a verification run: 0, or -1 + errno */
int verifier_enter(const req_t *r);                  /* in its child, before dropping privileges */
void verifier_started(void);                         /* in the daemon after the fork: take the logs fd */
char **verifier_env(char **envp);                    /* in its child: envp with TMPDIR (unless set) */
void verifier_drop(void);                            /* forget the private logs (kill, reset) */
int verifier_open(const char *path, int flags);      /* open a path under /logs/verifier in the private logs */
void mark_caps(int verifier, int root);              /* in a child: the verification mark, or none */
int extract_tar_at(int root, const char *tar, size_t len); /* files.c */
/* in its child, before covering them: the sandbox's own verifier places (places.c) */
#define PLACES_MAX_DEPTH 32
void places_report(double since, int tests); /* what the agent wrote there (tests: its /tests), on stderr */
void places_finding(const char *kind, const char *dir, const char *leaf); /* one `evsys-integrity:` line */
/* the verifier's /tmp (tmpview.c): a detached mount showing the agent's /tmp, never following a link in it;
 * `bytes` bounds what the verifier writes there */
int tmpview_mount(long long bytes);
int places_cover_preload(double since, int tmp); /* an /etc/ld.so.preload of its own (tmp: the
                                                * verifier's attached /tmp, where the file is made) */

/* ---- what the daemon passes on to every command: reported at start, put back by a reset (inherited.c) */
#define INHERITED_N 3 /* /proc entries: oom_score_adj, coredump_filter, autogroup */
void add_inherited_state(buf_t *h); /* to the ready frame */
/* from the host: pid `pid`'s limits and entries back to these (the ready frame's values); 0, or -1 with
 * `problem` naming what could not be put back and errno why */
int restore_inherited(int proc, const char *pid, const char *limits, char *const files[INHERITED_N],
                      char *problem, size_t size);

/* ---- `evsysd --reset`: a fresh root for a running sandbox, between two trials (reset.c) */
int reset_main(int argc, char **argv);
int fresh_network(void); /* the entered network namespace's TCP sockets destroyed, conntrack flushed (netreset.c) */

/* ---- processes and privileges (procs.c) */
void harden(void);
int kill_all(int *left);
void kill_tree(pid_t root);
void killpg_quiet(pid_t pgid);
unsigned long long free_bytes(const char *path);
void cgroup_scopes(const char *arg); /* "<agent fds>/<verifier fds>", from the daemon's command line */
int join_scope(int verifier);        /* in a child: into the agent's (0) or verifier's (1) cgroups */

#endif
