/* `evsysd --setup ...`: what runs on the host between the spawner and bubblewrap, for every sandbox.
 *
 *   evsysd --setup <report fd> <mount point> <storage bytes> <lowerdir list> <agent uid> <item>... -- <argv>
 *
 * The items, done in the order given (cgroups.py and sandbox.py build them, spawner.py passes them on):
 *   set=<value>:<file>    write a limit (pids.max, memory.max...) into the sandbox's cgroup, which the
 *                         orchestrator created; try=<value>:<file> the same, where a refusal is not an error
 *                         (memory.swap.max without swap accounting);
 *   join=<file>           join a cgroup (its cgroup.procs);
 *   fd=<n>:<file>         open a cgroup's cgroup.procs for writing as fd <n>, inherited through bwrap by the
 *                         daemon, which moves its children into their scope with it (cgsetup.py);
 *   nproc=<n>             set RLIMIT_NPROC, soft and hard: the process-count limit where no pids cgroup is
 *                         available (limits.py);
 *   netns                 a new network namespace whose loopback is up and whose unprivileged port start is 0
 *                         (root inside binds ports below 1024 as in a container: sshd on 22, nginx on 80);
 *   joinnet=<path>        join the network namespace at path instead (a pod member joins its owner's: here,
 *                         on the host, since from inside the sandbox's user namespace it could not);
 *   keep-sys              keep the host's /sys in the private mount namespace (a bind's source is below it).
 * Then it makes a private mount namespace (without the host's /sys), covers each host device node bwrap's
 * `--dev` binds into the sandbox with a read-only bind of itself (below), mounts a tmpfs of the storage size
 * on the mount point and the overlay (lower = idmapped clones of the cached layers showing the agent's files as <agent uid>, idmap.c; upper = that
 * tmpfs) at <mount point>/merged, joins a user namespace owned by <agent uid> that maps every id to itself (so
 * per-user kernel quotas are counted per sandbox, idmap.c), and execs argv (bwrap). A failure is written to
 * the report fd (closed on exec, so the spawner reads EOF on success) and the exit code is 127. The spawner starts this with
 * posix_spawn, which on a VM costs a fraction of forking a Python process (~1.4 ms of CPU plus copy-on-write
 * faults); writing the cgroup limits and making the network namespace here keeps their cost off the
 * orchestrator's event loop. */
#include "evsysd.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static int report_fd = -1;
static int keep_sys; /* a bind's source is under /sys: keep it mounted */

static int report(const char *what, const char *path)
{
    char msg[1200];
    int n = snprintf(msg, sizeof msg, "%s %.900s: %s", what, path, strerror(errno));
    if (report_fd >= 0 && write(report_fd, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0) {
        /* nothing more to do */
    }
    return 127;
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* "<value>:<file>": write value into file (values never hold a colon; paths may) */
static int set_limit(const char *item, int optional)
{
    char value[64];
    const char *colon = strchr(item, ':');
    size_t n = colon ? (size_t)(colon - item) : 0;
    if (!colon || n >= sizeof value) {
        errno = EINVAL;
        return report("malformed cgroup limit", item);
    }
    memcpy(value, item, n);
    value[n] = 0;
    if (write_file(colon + 1, value) != 0 && !optional) {
        char what[128];
        snprintf(what, sizeof what, "cannot set cgroup limit %s in", value);
        return report(what, colon + 1);
    }
    return 0;
}

/* A network namespace of the sandbox's own, loopback up, ports below 1024 open to every uid inside (what
 * Docker sets for its containers since 20.10). */
static int new_netns(void)
{
    if (unshare(CLONE_NEWNET) != 0)
        return report("unshare(CLONE_NEWNET) for", "the sandbox");
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, "lo");
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int ok = sock >= 0 && ioctl(sock, SIOCGIFFLAGS, &ifr) == 0;
    ifr.ifr_flags |= IFF_UP;
    ok = ok && ioctl(sock, SIOCSIFFLAGS, &ifr) == 0;
    if (sock >= 0)
        close(sock);
    if (!ok)
        return report("cannot bring up the loopback interface of", "the sandbox");
    if (write_file("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0") != 0)
        return report("cannot let the sandbox bind ports below 1024:", "ip_unprivileged_port_start");
    return 0;
}

/* The host device nodes bwrap's `--dev` binds into the sandbox's /dev (from this namespace's /dev). Root in the
 * sandbox is host uid 0 (the user namespace is an identity map) and owns them: on a writable mount its chmod,
 * chown or utimes would change the host's own /dev/null. Here each is covered by a bind of itself made
 * read-only (MOUNT_ATTR_RDONLY alone: not nodev, so the devices still open, read and write: the kernel takes no
 * write access on the mount of a device file it opens). bwrap's binds copy the flag, and copying this namespace
 * into the sandbox's user namespace locks it: nothing inside can make them writable again, and a reset moves
 * these binds into the new /dev as they are (reset.c). Private to this namespace: the host's /dev is untouched. */
static const char *const DEV_NODES[] = {"/dev/null",   "/dev/zero",    "/dev/full",
                                         "/dev/random", "/dev/urandom", "/dev/tty"};

static int readonly_dev_nodes(void)
{
    for (size_t k = 0; k < sizeof DEV_NODES / sizeof *DEV_NODES; k++) {
        if (mount(DEV_NODES[k], DEV_NODES[k], NULL, MS_BIND, NULL) != 0)
            return report("cannot bind the device node", DEV_NODES[k]);
        if (make_readonly(DEV_NODES[k]) != 0)
            return report("cannot make read-only the device node", DEV_NODES[k]);
    }
    return 0;
}

/* RLIMIT_NPROC to set, 0 for none. Set after the user namespace is made: the kernel caps a namespace's
 * processes at its creator's RLIMIT_NPROC as it was then (counted for every uid inside, root and the
 * machinery included), so set before, the limit would starve the agent of processes the daemon holds. */
static unsigned long nproc_limit;

static int setup_item(const char *item)
{
    if (strncmp(item, "set=", 4) == 0 || strncmp(item, "try=", 4) == 0)
        return set_limit(item + 4, item[0] == 't');
    if (strncmp(item, "fd=", 3) == 0) {
        char *colon;
        long n = strtol(item + 3, &colon, 10);
        int fd = *colon == ':' ? open(colon + 1, O_WRONLY) : -1;
        if (fd < 0 || n < 3 || (fd != n && (dup2(fd, (int)n) < 0 || close(fd) != 0)))
            return report("cannot open the cgroup file", item + 3);
        return 0;
    }
    if (strncmp(item, "join=", 5) == 0)
        return write_file(item + 5, "0") == 0 ? 0 : report("cannot join cgroup", item + 5);
    if (strncmp(item, "nproc=", 6) == 0) { /* set once in the sandbox's user namespace (setup_main) */
        nproc_limit = strtoul(item + 6, NULL, 10);
        return 0;
    }
    if (strcmp(item, "netns") == 0)
        return new_netns();
    if (strncmp(item, "joinnet=", 8) == 0) {
        int ns = open(item + 8, O_RDONLY | O_CLOEXEC);
        int rc = ns >= 0 ? setns(ns, CLONE_NEWNET) : -1;
        if (ns >= 0)
            close(ns);
        return rc == 0 ? 0 : report("cannot join the network namespace", item + 8);
    }
    if (strcmp(item, "keep-sys") == 0) {
        keep_sys = 1;
        return 0;
    }
    errno = EINVAL;
    return report("unknown setup item", item);
}

int setup_main(int argc, char **argv)
{
    if (argc < 8)
        return 127;
    report_fd = atoi(argv[2]);
    const char *mount_point = argv[3], *storage = argv[4], *lowers = argv[5];
    uid_t uid = (uid_t)strtoul(argv[6], NULL, 10);
    int k = 7;
    for (; k < argc && strcmp(argv[k], "--"); k++)
        if (setup_item(argv[k]) != 0)
            return 127;
    if (k + 1 >= argc) {
        errno = EINVAL;
        return report("no command after --", mount_point);
    }
    write_file("/proc/self/oom_score_adj", "-1000"); /* best effort: spare the daemon from the OOM killer */
    if (unshare(CLONE_NEWNS) != 0)
        return report("unshare(CLONE_NEWNS) for", mount_point);
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return report("cannot make mounts private under", "/");
    /* bwrap re-reads the whole mount table for every bind it makes: the host's /sys (sysfs and, on many hosts,
     * a dozen cgroup mounts below it), which neither bwrap nor the sandbox uses, is dropped from this private
     * namespace first (unless the orchestrator says a bind needs it). Best effort: where /sys is no mount
     * point, or one this namespace may not unmount (a container's), it stays. */
    if (!keep_sys)
        umount2("/sys", MNT_DETACH);
    if (readonly_dev_nodes() != 0)
        return 127;
    char opts[8192], upper[4096], work[4096], merged[4096], mapped[4096];
    snprintf(opts, sizeof opts, "size=%s,mode=755", storage);
    if (mount("evsys-storage", mount_point, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        return report("mount tmpfs on", mount_point);
    snprintf(upper, sizeof upper, "%s/upper", mount_point);
    snprintf(work, sizeof work, "%s/work", mount_point);
    snprintf(merged, sizeof merged, "%s/merged", mount_point);
    if (mkdir(upper, 0755) != 0 || mkdir(work, 0755) != 0 || mkdir(merged, 0755) != 0)
        return report("cannot create the overlay directories in", mount_point);
    if (idmapped_lowers(lowers, uid, mapped, sizeof mapped) != 0)
        return report("cannot make idmapped layers (Linux >= 5.19, a layer cache on ext4, xfs, btrfs or tmpfs) of",
                      lowers);
    if ((size_t)snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s", mapped, upper, work) >= sizeof opts) {
        errno = E2BIG;
        return report("too many layers for", merged);
    }
    if (mount("evsys-root", merged, "overlay", MS_NOSUID | MS_NODEV, opts) != 0)
        return report("mount overlay on", merged);
    if (enter_owned_userns(uid) != 0)
        return report("cannot make the user namespace (owned by the agent uid) of", merged);
    struct rlimit nproc = {.rlim_cur = nproc_limit, .rlim_max = nproc_limit};
    if (nproc_limit && setrlimit(RLIMIT_NPROC, &nproc) != 0)
        return report("cannot set RLIMIT_NPROC of", merged);
    fcntl(report_fd, F_SETFD, FD_CLOEXEC);
    execv(argv[k + 1], argv + k + 1);
    return report("cannot exec", argv[k + 1]);
}
