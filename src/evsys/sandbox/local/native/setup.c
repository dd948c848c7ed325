/* `evsysd --setup ...`: what runs on the host between the spawner and bubblewrap, for every sandbox.
 *
 *   evsysd --setup <report fd> <mount point> <storage bytes> <lowerdir list> <agent uid> <cgroup.procs file>...
 *                  -- <argv>
 *
 * Joins the sandbox's cgroups (one cgroup.procs file per hierarchy; an item `nproc=<n>` instead sets RLIMIT_NPROC,
 * soft and hard, the process-count limit where no pids cgroup is available, limits.py), makes a private mount namespace, mounts a
 * tmpfs of the storage size on the mount point and the overlay (lower = idmapped clones of the cached layers
 * showing the agent's files as <agent uid>, idmap.c; upper = that tmpfs) at <mount point>/merged, then execs
 * argv (bwrap). A failure is written to the report fd (closed on exec, so
 * the spawner reads EOF on success) and the exit code is 127. The spawner starts this with posix_spawn, which
 * on a VM costs a fraction of forking a Python process (~1.4 ms of CPU plus copy-on-write faults). */
#include "evsysd.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static int report_fd = -1;

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

int setup_main(int argc, char **argv)
{
    if (argc < 8)
        return 127;
    report_fd = atoi(argv[2]);
    const char *mount_point = argv[3], *storage = argv[4], *lowers = argv[5];
    uid_t uid = (uid_t)strtoul(argv[6], NULL, 10);
    int k = 7;
    for (; k < argc && strcmp(argv[k], "--"); k++) {
        if (strncmp(argv[k], "nproc=", 6) == 0) {
            struct rlimit nproc = {.rlim_cur = strtoul(argv[k] + 6, NULL, 10)};
            nproc.rlim_max = nproc.rlim_cur;
            if (setrlimit(RLIMIT_NPROC, &nproc) != 0)
                return report("cannot set RLIMIT_NPROC", argv[k]);
        } else if (write_file(argv[k], "0") != 0)
            return report("cannot join cgroup", argv[k]);
    }
    if (k + 1 >= argc) {
        errno = EINVAL;
        return report("no command after --", mount_point);
    }
    write_file("/proc/self/oom_score_adj", "-1000"); /* best effort: spare the daemon from the OOM killer */
    if (unshare(CLONE_NEWNS) != 0)
        return report("unshare(CLONE_NEWNS) for", mount_point);
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return report("cannot make mounts private under", "/");
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
    fcntl(report_fd, F_SETFD, FD_CLOEXEC);
    execv(argv[k + 1], argv + k + 1);
    return report("cannot exec", argv[k + 1]);
}
