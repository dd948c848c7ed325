/* The verifier's private places (docs/sandbox.md, "The verifier's private places").
 *
 * A verification run is an exec request with "verifier": <bytes> and the tests as a tar for payload. Its child
 * makes a mount namespace of its own and attaches fresh tmpfs (of that many bytes) at /tests (the tests,
 * extracted by the child itself) and /logs/verifier (writable by the command's user), at /tmp a view of the
 * agent's /tmp that follows no link (an overlay whose writes go to a tmpfs of the run's own: tmpview.c), and a
 * read-only /etc/ld.so.preload of its own (places.c), before it drops privileges and runs anything. The
 * agent's surviving processes stay in the sandbox's namespace: they never see these mounts, so they can
 * neither write the verifier's reward, nor swap its tests, nor make the verifier follow a link in its /tmp.
 * Nor can they move the directory the private /tests sits on: before forking, the daemon makes the sandbox's
 * own /tests a read-only mountpoint of the sandbox's namespace (seal_tests). The child sends the root of its
 * /logs/verifier back over a socketpair; the daemon keeps that fd, and
 * every later read of /logs/verifier (pack, read) is served from it, never from the sandbox's own directory.
 *
 * Every process of the run carries one capability no other process in the sandbox has (MARK_CAP: it grants
 * nothing of use here), so none of them, root included, passes the kernel's ptrace access check on it: their
 * /proc/<pid>/root, cwd, fd and ns (the ways into another mount namespace) stay closed. A root run has it in
 * its inheritable set (an exec as root keeps it), a run as another user as an ambient capability. */
#include "evsysd.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MARK_CAP CAP_WAKE_ALARM

int verifier_logs_fd = -1;
static int chan[2] = {-1, -1}; /* the child sends its /logs/verifier back over chan[1] */
static int tests_before = -1;  /* the sandbox's /tests as the agent left it, before its first seal */
static const char *pending_tar;
static size_t pending_len;

static int place(int at, const char *leaf);

/* in the daemon, in the sandbox's own namespace: an empty read-only tmpfs at /tests (once), so that no process
 * of the sandbox can rename, remove or replace the directory the run's private /tests is attached onto (a
 * mountpoint of the caller's own namespace cannot be renamed or removed, and they lack CAP_SYS_ADMIN to
 * unmount it); what was there before stays readable to the run's report through `tests_before` */
static int seal_tests(void)
{
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int at = root < 0 ? -1 : place(root, "tests");
    struct statx sx;
    int rc = at < 0 ? -1 : 0;
    if (at >= 0 && statx(at, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx) == 0 &&
        !(sx.stx_attributes & STATX_ATTR_MOUNT_ROOT)) {
        tests_before = openat(root, "tests", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int m = detached("tmpfs", "size=4096,mode=755",
                         MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
        rc = m < 0 ? -1 : sys_move_mount(m, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
        if (m >= 0)
            close(m);
    }
    if (at >= 0)
        close(at);
    if (root >= 0)
        close(root);
    return rc;
}

int verifier_prepare(const char *tar, size_t len)
{
    if (seal_tests() != 0) {
        dprintf(2, "evsys: cannot seal /tests before a verification run: %s\n", strerror(errno));
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, chan) != 0)
        return -1;
    pending_tar = tar, pending_len = len;
    return 0;
}

static int say(const char *what)
{
    dprintf(2, "evsys: cannot set up the verifier's private mounts: %s: %s\n", what, strerror(errno));
    return -1;
}

/* the directory `leaf` of `at` as an O_PATH fd, never through a symlink: a file or a link planted there is
 * replaced by an empty directory */
static int place(int at, const char *leaf)
{
    int fd = openat(at, leaf, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0)
        return fd;
    if (errno != ENOENT)
        unlinkat(at, leaf, 0);
    mkdirat(at, leaf, 0755);
    return openat(at, leaf, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static int fresh(long long bytes, const char *mode, uid_t owner)
{
    char opts[160];
    snprintf(opts, sizeof opts, "size=%lld,mode=%s,uid=%u,gid=%u", bytes, mode, (unsigned)owner, (unsigned)owner);
    return detached("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
}

static int attach_at(int mnt, int at, const char *leaf)
{
    int target = place(at, leaf);
    int rc = target < 0 ? -1
                        : sys_move_mount(mnt, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
    if (target >= 0)
        close(target);
    return rc;
}

/* the run's TMPDIR: a fresh root-owned tmpfs (mode 1777, charged to the verifier's cgroup as it is written)
 * attached inside the verifier's /tmp view, at a directory of the view's own upper layer (or of the fallback
 * copy), so no process of the sandbox can reach it, pre-plant it or unmount it by renaming the directory; the
 * tmpfs is mounted without nosymfollow, so the links a verifier's tools make there (apt's and dpkg's
 * apt-dpkg-install-* directory) are followed, while links anywhere else in /tmp still are not */
static int attach_tmpdir(long long bytes, int tmp)
{
    int m = fresh(bytes, "1777", 0);
    int rc = m < 0 ? -1 : attach_at(m, tmp, VERIFIER_TMPDIR + sizeof "/tmp");
    if (m >= 0)
        close(m);
    return rc;
}

char **verifier_env(char **envp)
{
    size_t n = 0;
    for (; envp[n]; n++)
        if (!strncmp(envp[n], "TMPDIR=", 7))
            return envp; /* the task's own choice */
    char **env = xmalloc((n + 2) * sizeof *env);
    memcpy(env, envp, n * sizeof *env);
    env[n] = "TMPDIR=" VERIFIER_TMPDIR, env[n + 1] = NULL;
    return env;
}

static int send_fd(int sock, int fd)
{
    char byte = 0;
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

int verifier_enter(const req_t *r)
{
    if (unshare(CLONE_NEWNS) != 0)
        return say("unshare");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return say("mount propagation");
    places_report(r->since, tests_before);
    int tests = fresh(r->verifier, "755", 0), logs = fresh(r->verifier, "755", r->root ? 0 : AGENT_UID);
    if (tests < 0 || logs < 0)
        return say("tmpfs");
    int tmp = tmpview_mount(r->verifier);
    if (tmp < 0)
        return say("the view of /tmp");
    if (extract_tar_at(tests, pending_tar, pending_len) != 0)
        return say("placing the tests");
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int parent = root < 0 ? -1 : place(root, "logs");
    if (parent < 0)
        return say("/logs");
    if (attach_at(tests, root, "tests") != 0 || attach_at(logs, parent, "verifier") != 0 ||
        attach_at(tmp, root, "tmp") != 0)
        return say("attaching them");
    if (places_cover_preload(r->since, tmp) != 0)
        return say("/etc/ld.so.preload");
    if (attach_tmpdir(r->verifier, tmp) != 0)
        return say("its TMPDIR");
    if (send_fd(chan[1], logs) != 0)
        return say("handing /logs/verifier to the daemon");
    close(tests), close(tmp), close(logs), close(root), close(parent);
    return 0;
}

void verifier_drop(void)
{
    if (verifier_logs_fd >= 0)
        close(verifier_logs_fd);
    verifier_logs_fd = -1;
}

/* in the daemon, after forking a verification run: its /logs/verifier replaces the previous run's (none when
 * its setup failed: the command then exits 126 with the reason) */
void verifier_started(void)
{
    if (tests_before >= 0)
        close(tests_before);
    tests_before = -1;
    close(chan[1]);
    char byte;
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    verifier_drop();
    ssize_t n;
    do
        n = recvmsg(chan[0], &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    struct cmsghdr *c = n == 1 ? CMSG_FIRSTHDR(&m) : NULL;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(&verifier_logs_fd, CMSG_DATA(c), sizeof(int));
    close(chan[0]);
    chan[0] = chan[1] = -1;
}

/* `path` opened with `flags`; a file directly under /logs/verifier comes from the private logs when a
 * verification run made them */
int verifier_open(const char *path, int flags)
{
    size_t n = strlen(VERIFIER_LOGS);
    if (verifier_logs_fd >= 0 && strncmp(path, VERIFIER_LOGS "/", n + 1) == 0 && !strchr(path + n + 1, '/'))
        return openat(verifier_logs_fd, path + n + 1, flags);
    return open(path, flags);
}

/* in a child before it execs: a verification run keeps the mark (as root in its inheritable set; as another
 * user, called after setuid with PR_SET_KEEPCAPS, as its only capability, ambient), any other child drops it */
void mark_caps(int verifier, int root)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    uint32_t bit = 1u << (MARK_CAP - 32);
    if (syscall(SYS_capget, &hdr, data) != 0)
        _exit(127);
    if (verifier && root)
        return;
    if (!verifier) {
        data[1].inheritable &= ~bit;
    } else {
        memset(data, 0, sizeof data);
        data[1].permitted = data[1].inheritable = bit;
    }
    if (syscall(SYS_capset, &hdr, data) != 0)
        _exit(127);
    if (verifier && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, MARK_CAP, 0, 0) != 0)
        _exit(127);
}
