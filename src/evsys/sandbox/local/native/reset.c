/* `evsysd --reset ...`: gives a running sandbox a fresh root, on the host, between two trials (a slot's reset,
 * docs/sandbox.md).
 *
 *   evsysd --reset <report fd> <bwrap pidfd> <daemon pidfd> <daemon pid> <setup mount point> <storage bytes>
 *                  <lowerdirs> <tmp bytes> <jobs bytes> <agent uid> <shm bytes> <userns fd | -> <limits>
 *                  <oom_score_adj> <coredump_filter> <autogroup>
 *
 * The last four are what the daemon passes on to every command as it reported them at start (inherited.c).
 *
 * The user namespace mapping the layers' agent uid to the sandbox's (idmap.c) is given as an open fd when the
 * orchestrator kept one from an earlier reset for this uid; with "-" a new one is made and passed back over the
 * report fd (a unix datagram socket: one byte with the fd as SCM_RIGHTS), for the orchestrator to keep.
 * The daemon has already killed every other process in the sandbox. This then
 *  0. puts back the daemon's rlimits, oom_score_adj, coredump_filter and autogroup nice where root inside
 *     changed them (failing when it cannot: a hard limit lowered, without CAP_SYS_RESOURCE);
 *  1. gives the sandbox's network namespace a fresh one's state: destroys the TCP sockets left in it (TIME_WAIT,
 *     closing, orphaned) and flushes its connection tracking (netreset.c); it still refuses when TCP sockets
 *     remain after that (a connection would cross trials);
 *  2. builds, detached, a new storage tmpfs + overlay on the same lower layers (idmapped for the same agent
 *     uid, idmap.c), new /tmp, jobs, /dev and /dev/shm tmpfs, and a new devpts instance (root may have changed
 *     the old one's ptmx node, which every pty of the next trial would go through);
 *  3. empties the sandbox's IPC namespace (SysV segments, semaphores, queues; POSIX message queues);
 *  4. enters the sandbox's mount namespace and root, attaches the new overlay, moves the sandbox's own mounts
 *     (/proc, /usr, the daemon, binds, the device nodes) into it, mounts the fresh tmpfs and devpts, and
 *     pivot_roots: the daemon's root becomes the new overlay and the old root is detached; /dev is read-only
 *     again (like bwrap's `--remount-ro /dev` at start), its /dev/shm a fresh size-limited 1777 tmpfs;
 *  5. unmounts the old storage in the setup namespace (bwrap's), so its memory is freed.
 * A failure is written to the report fd and the exit code is 127: the caller then discards the sandbox. Success
 * is the one-byte datagram "K", sent last: the caller does not see the exit status. */
#include "evsysd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NEW_ROOT "/tmp" /* where the new overlay is attached (stacked) in the old root before the pivot */
#define MAX_MOUNTS 256

static int report_fd = -1;

static int fail(const char *what, const char *path)
{
    char msg[1200];
    int n = snprintf(msg, sizeof msg, "%s %.900s: %s", what, path, errno ? strerror(errno) : "refused");
    if (report_fd >= 0 && write(report_fd, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0) {
        /* nothing more to do */
    }
    return 127;
}

/* pass a new mapping namespace back to the orchestrator, which keeps it for the next reset of this uid */
static void send_userns(int ns)
{
    char byte = 'U', control[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &ns, sizeof(int));
    if (sendmsg(report_fd, &msg, MSG_NOSIGNAL) < 0) {
        /* the orchestrator makes a new one next time */
    }
}

/* the new root: a storage tmpfs (upper + work) and an overlay of `lowers` on it, detached */
static int new_overlay(const char *storage, const char *lowers, uid_t uid, int userns)
{
    char opts[128], path[64], mapped[4096];
    int made = -1;
    int rc = idmapped_lowers_in(lowers, uid, userns, &made, mapped, sizeof mapped);
    if (made >= 0) {
        send_userns(made);
        close(made);
    }
    if (rc != 0)
        return -1;
    snprintf(opts, sizeof opts, "source=evsys-storage,size=%s,mode=755", storage);
    int st = detached("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (st < 0 || mkdirat(st, "upper", 0755) != 0 || mkdirat(st, "work", 0755) != 0)
        return -1;
    int fd = sys_fsopen("overlay");
    if (fd < 0)
        return -1;
    sys_fsconfig(fd, FSCONFIG_SET_STRING, "source", "evsys-root");
    char list[8192], *save = NULL;
    snprintf(list, sizeof list, "%s", mapped);
    for (char *dir = strtok_r(list, ":", &save); dir; dir = strtok_r(NULL, ":", &save))
        if (sys_fsconfig(fd, FSCONFIG_SET_STRING, "lowerdir+", dir) != 0)
            goto out;
    snprintf(path, sizeof path, "/proc/self/fd/%d/upper", st);
    if (sys_fsconfig(fd, FSCONFIG_SET_STRING, "upperdir", path) != 0)
        goto out;
    snprintf(path, sizeof path, "/proc/self/fd/%d/work", st);
    if (sys_fsconfig(fd, FSCONFIG_SET_STRING, "workdir", path) != 0)
        goto out;
    if (sys_fsconfig(fd, FSCONFIG_CMD_CREATE, NULL, NULL) != 0)
        goto out;
    int m = sys_fsmount(fd, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    close(fd);
    close(st); /* the overlay keeps the storage alive */
    return m;
out:
    close(fd);
    return -1;
}

/* TCP sockets left in the sandbox's network namespace (hashed: "inuse", and TIME_WAIT: "tw"), from its
 * per-namespace counters (reading /proc/<pid>/net/tcp instead would walk the host's whole connection table) */
static int tcp_sockets(int proc, const char *pid)
{
    int count = 0;
    const char *files[][2] = {{"net/sockstat", "TCP: inuse %d orphan %*d tw %d"}, {"net/sockstat6", "TCP6: inuse %d"}};
    for (int k = 0; k < 2; k++) {
        char path[64], data[2048];
        snprintf(path, sizeof path, "%s/%s", pid, files[k][0]);
        int fd = openat(proc, path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, data, sizeof data - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n <= 0)
            continue;
        data[n] = 0;
        const char *line = strstr(data, k ? "TCP6:" : "TCP:");
        int inuse = 0, tw = 0;
        if (line && sscanf(line, files[k][1], &inuse, &tw) >= 1)
            count += inuse + tw;
    }
    return count;
}

/* remove every SysV object and POSIX message queue of the (already entered) IPC namespace */
static void empty_ipc(void)
{
    struct shmid_ds shm;
    int max = shmctl(0, SHM_INFO, &shm);
    for (int i = 0; i <= max; i++) {
        int id = shmctl(i, SHM_STAT, &shm);
        if (id >= 0)
            shmctl(id, IPC_RMID, NULL);
    }
    union semun {
        int val;
        struct semid_ds *buf;
        unsigned short *array;
        struct seminfo *info;
    } arg;
    struct semid_ds sem;
    struct seminfo seminfo;
    arg.info = &seminfo;
    max = semctl(0, 0, SEM_INFO, arg);
    arg.buf = &sem;
    for (int i = 0; i <= max; i++) {
        int id = semctl(i, 0, SEM_STAT, arg);
        if (id >= 0)
            semctl(id, 0, IPC_RMID);
    }
    struct msqid_ds msq;
    max = msgctl(0, MSG_INFO, &msq);
    for (int i = 0; i <= max; i++) {
        int id = msgctl(i, MSG_STAT, &msq);
        if (id >= 0)
            msgctl(id, IPC_RMID, NULL);
    }
    int mq = detached("mqueue", "", 0);
    DIR *d = mq >= 0 ? dir_at(mq, ".", 0) : NULL;
    for (struct dirent *e; d && (e = next_entry(d));)
        unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
    if (mq >= 0)
        close(mq);
}

typedef struct {
    int id, parent;
    char point[512];
} mnt_t;

/* the new filesystems of the sandbox (detached mounts): its /tmp, jobs dir, /dev, /dev/shm and /dev/pts */
typedef struct {
    int tmp, jobs, dev, shm, pts;
} fresh_t;

static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] && s[3]) {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
}

/* this process's mounts (its mount namespace, paths relative to its root), read through the host's /proc */
static int read_mounts(int proc, mnt_t *out, int max)
{
    int fd = openat(proc, "self/mountinfo", O_RDONLY | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        mnt_t m;
        if (sscanf(line, "%d %d %*s %*s %511s", &m.id, &m.parent, m.point) == 3) {
            unescape(m.point);
            out[n++] = m;
        }
    }
    fclose(f);
    return n;
}

/* create `path` (under the new root) as a directory or, when the old mount point is not one, an empty file;
 * parents as 0755 directories, like bwrap's --dir */
static int make_point(const char *path, int directory)
{
    char buf[600];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + strlen(NEW_ROOT) + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (directory)
        return mkdir(buf, 0755) == 0 || errno == EEXIST ? 0 : -1;
    int fd = open(buf, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    return fd >= 0 ? close(fd) : -1;
}

static int move_into_new_root(const char *point)
{
    char target[600];
    struct stat st;
    snprintf(target, sizeof target, NEW_ROOT "%s", point);
    if (lstat(point, &st) != 0 || make_point(target, S_ISDIR(st.st_mode)) != 0)
        return fail("cannot create the mount point", target);
    if (sys_move_mount(AT_FDCWD, point, AT_FDCWD, target, 0) != 0)
        return fail("cannot move the mount", point);
    return 0;
}

static int attach(int mfd, const char *target, mode_t mode)
{
    if (make_point(target, 1) != 0)
        return fail("cannot create the mount point", target);
    if (sys_move_mount(mfd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) != 0)
        return fail("cannot attach a new mount on", target);
    if (mode && chmod(target, mode) != 0)
        return fail("cannot set the mode of", target);
    return 0;
}

/* a fresh /dev like bwrap's --dev: the old device-node binds moved over (not the old /dev/shm and devpts: new
 * ones), the links recreated, then read-only */
static int rebuild_dev(const fresh_t *fs, const mnt_t *mounts, int n, int dev_id)
{
    if (attach(fs->dev, NEW_ROOT "/dev", 0) != 0 || attach(fs->pts, NEW_ROOT "/dev/pts", 0) != 0)
        return 127;
    for (int k = 0; k < n; k++)
        if (mounts[k].parent == dev_id && strcmp(mounts[k].point, "/dev/shm") != 0 &&
            strcmp(mounts[k].point, "/dev/pts") != 0 && move_into_new_root(mounts[k].point) != 0)
            return 127;
    static const char *const links[][2] = {{"/proc/self/fd", "fd"},     {"/proc/self/fd/0", "stdin"},
                                           {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
                                           {"/proc/kcore", "core"},      {"pts/ptmx", "ptmx"}};
    char path[128];
    for (size_t k = 0; k < sizeof links / sizeof *links; k++) {
        snprintf(path, sizeof path, NEW_ROOT "/dev/%s", links[k][1]);
        if (symlink(links[k][0], path) != 0 && errno != EEXIST)
            return fail("cannot create", path);
    }
    if (attach(fs->shm, NEW_ROOT "/dev/shm", 01777) != 0)
        return 127;
    if (make_readonly(NEW_ROOT "/dev") != 0)
        return fail("cannot make read-only", "/dev");
    return 0;
}

/* move the old root's mounts into the new root (fresh tmpfs for /tmp, the jobs dir and /dev; no /tests seal),
 * then pivot */
static int switch_root(int proc, const fresh_t *fs)
{
    static mnt_t mounts[MAX_MOUNTS];
    int n = read_mounts(proc, mounts, MAX_MOUNTS), root_id = -1, dev_id = -1;
    if (n <= 0)
        return fail("cannot read the sandbox's mounts", "mountinfo");
    for (int k = 0; k < n; k++)
        if (strcmp(mounts[k].point, "/") == 0)
            root_id = mounts[k].id;
    for (int k = 0; k < n; k++)
        if (mounts[k].parent == root_id && strcmp(mounts[k].point, "/dev") == 0)
            dev_id = mounts[k].id;
    for (int k = 0; k < n; k++) {
        const char *p = mounts[k].point;
        /* not /tests either: the seal a verification run put there (verifier.c) is the last trial's, and a
         * fresh sandbox has none (no bind may go there) */
        if (mounts[k].parent != root_id || !strcmp(p, "/tmp") || !strcmp(p, JOB_DIR) || !strcmp(p, "/dev") ||
            !strcmp(p, "/tests"))
            continue;
        if (move_into_new_root(p) != 0)
            return 127;
    }
    if (dev_id < 0 || rebuild_dev(fs, mounts, n, dev_id) != 0)
        return dev_id < 0 ? fail("no /dev mount in", "the sandbox") : 127;
    if (attach(fs->tmp, NEW_ROOT "/tmp", 01777) != 0 || attach(fs->jobs, NEW_ROOT JOB_DIR, 0711) != 0)
        return 127;
    if (chdir(NEW_ROOT) != 0 || syscall(SYS_pivot_root, ".", ".") != 0)
        return fail("pivot_root to", "the new root");
    if (umount2(".", MNT_DETACH) != 0)
        return fail("cannot detach the old root of", "the sandbox");
    return chdir("/") == 0 ? 0 : fail("chdir", "/");
}

/* the sandbox's root directory, opened through /proc; -1 unless the pidfd's process is still alive after the
 * open (then the pid was not reused: the fd is that process's root), and lives in a mount namespace other
 * than ours (never the host's) */
static int sandbox_root(int proc, const char *pid, int pidfd)
{
    char path[64];
    struct stat theirs, ours;
    snprintf(path, sizeof path, "%s/root", pid);
    int fd = openat(proc, path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    snprintf(path, sizeof path, "%s/ns/mnt", pid);
    int other_ns = fstatat(proc, path, &theirs, 0) == 0 && fstatat(proc, "self/ns/mnt", &ours, 0) == 0 &&
                   theirs.st_ino != ours.st_ino;
    if (fd < 0 || !other_ns || syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int reset_main(int argc, char **argv)
{
    if (argc != 18)
        return 127;
    report_fd = atoi(argv[2]);
    int bwrap_fd = atoi(argv[3]), daemon_fd = atoi(argv[4]);
    const char *daemon = argv[5], *mount_point = argv[6];
    char opts[128], path[600];
    int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (proc < 0)
        return fail("cannot open", "/proc");
    int root_fd = sandbox_root(proc, daemon, daemon_fd);
    if (root_fd < 0)
        return fail("the sandbox's daemon is gone or not in a sandbox:", daemon);
    if (restore_inherited(proc, daemon, argv[14], argv + 15, path, sizeof path) != 0)
        return fail("cannot put back the sandbox daemon's", path);
    if (setns(daemon_fd, CLONE_NEWNET) != 0 || fresh_network() != 0)
        return fail("cannot close the sockets left in the network namespace of", daemon);
    int sockets = tcp_sockets(proc, daemon);
    if (sockets > 0) {
        errno = 0;
        snprintf(path, sizeof path, "%d TCP socket(s) (TIME_WAIT or closing) remain in", sockets);
        return fail(path, "the sandbox's network namespace");
    }
    int userns = strcmp(argv[13], "-") == 0 ? -1 : atoi(argv[13]);
    int root = new_overlay(argv[7], argv[8], (uid_t)strtoul(argv[11], NULL, 10), userns);
    fresh_t fs;
    snprintf(opts, sizeof opts, "source=tmpfs,size=%s,mode=755", argv[9]);
    fs.tmp = detached("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    snprintf(opts, sizeof opts, "source=tmpfs,size=%s,mode=711", argv[10]);
    fs.jobs = detached("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    /* no size, like bwrap's --dev: it is read-only once its links are made */
    fs.dev = detached("tmpfs", "source=tmpfs,mode=755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    snprintf(opts, sizeof opts, "source=tmpfs,size=%s,mode=1777", argv[12]);
    fs.shm = detached("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    fs.pts = detached("devpts", "source=devpts,newinstance,ptmxmode=0666,mode=620",
                      MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
    if (root < 0 || fs.tmp < 0 || fs.jobs < 0 || fs.dev < 0 || fs.shm < 0 || fs.pts < 0)
        return fail("cannot build the new root from", argv[8]);
    /* namespaces through the pidfds: never another process that got a reused pid */
    if (setns(daemon_fd, CLONE_NEWIPC) != 0)
        return fail("cannot enter the IPC namespace of", daemon);
    empty_ipc();
    if (setns(daemon_fd, CLONE_NEWNS) != 0 || fchdir(root_fd) != 0 || chroot(".") != 0)
        return fail("cannot enter the mount namespace of", daemon);
    if (sys_move_mount(root, "", AT_FDCWD, NEW_ROOT, MOVE_MOUNT_F_EMPTY_PATH) != 0)
        return fail("cannot attach the new root on", NEW_ROOT);
    int rc = switch_root(proc, &fs);
    if (rc != 0)
        return rc;
    if (setns(bwrap_fd, CLONE_NEWNS) != 0)
        return fail("cannot enter the setup mount namespace of bwrap", argv[3]);
    snprintf(path, sizeof path, "%s/merged", mount_point);
    if (umount2(path, MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
        return fail("cannot unmount", path);
    if (umount2(mount_point, MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
        return fail("cannot unmount", mount_point);
    /* the orchestrator trusts this, not the exit status: the sandbox spawner that started us reaps us */
    if (send(report_fd, "K", 1, MSG_NOSIGNAL) != 1)
        return 127;
    return 0;
}
