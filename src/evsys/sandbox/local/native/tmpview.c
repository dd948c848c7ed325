/* The verifier's /tmp (verifier.c): what the agent left in its /tmp, shown without copying it and without ever
 * following a link planted there (Harbor's verifier shares the container's /tmp).
 *
 * An overlay: its one lower layer is the agent's /tmp (read-only through the overlay), its upper and work
 * directories are on a fresh tmpfs of the verifier's own (`bytes`, the size of the sandbox's /tmp), and it is
 * mounted nosymfollow, nodev and nosuid. Reading the agent's files costs no memory (no page is duplicated); a
 * file the tests write, or open for writing (copy-up), lands on the verifier's tmpfs and is charged to the
 * writer's cgroup, the verifier's. Path resolution never follows a link in the view, whoever made it (ELOOP;
 * readlink still shows it). A link the agent left that names a verifier place is reported
 * (verifier_place_written).
 *
 * Where the kernel cannot make that overlay, the view is a copy of the agent's directories and regular files
 * (never a link, FIFO, socket or device), made by the verification run's child (in the verifier's cgroup,
 * never the daemon) onto a fresh tmpfs, that stops at COPY_BUDGET bytes (within the verifier's memory reserve,
 * cgsetup.py) with a warning line on stderr. */
#include "evsysd.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define COPY_BUDGET (64LL << 20) /* the fallback copy's bytes: the smallest verifier reserve is 128 MiB */
#define MAX_VISITS 100000        /* entries the link scan (and the copy) look at */
#define VIEW_ATTRS (MOUNT_ATTR_NOSYMFOLLOW | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

static long long copy_left; /* bytes the fallback copy may still write */
static int copy_cut;        /* a file was left out for the budget */
static int visits;          /* entries looked at so far */
static int copying;         /* the fallback copy: else the overlay's whiteouts */
static int reporting;       /* links naming a verifier place are reported (once: by the first walk) */

/* a link's target naming a verifier place */
static int names_verifier_place(const char *target)
{
    return strstr(target, "logs/verifier") || strstr(target, "ld.so.preload") || !strncmp(target, "/tests", 6) ||
           strstr(target, "../tests");
}

static void copy_file(int from, int to, const char *name, const struct stat *st)
{
    int src = openat(from, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat now;
    if (src < 0)
        return;
    if (fstat(src, &now) == 0 && S_ISREG(now.st_mode) && now.st_size > copy_left)
        copy_cut = 1;
    else if (S_ISREG(now.st_mode)) { /* not swapped for something else meanwhile */
        int dst = openat(to, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (dst >= 0) {
            off_t left = now.st_size;
            copy_left -= left;
            while (left > 0) {
                ssize_t n = sendfile(dst, src, NULL, (size_t)left);
                if (n <= 0)
                    break;
                left -= n;
            }
            struct timespec times[2] = {st->st_atim, st->st_mtim};
            if (fchown(dst, now.st_uid, now.st_gid) != 0 || fchmod(dst, now.st_mode & 07777) != 0 ||
                futimens(dst, times) != 0) { /* best effort: the content is what matters */
            }
            close(dst);
        }
    }
    close(src);
}

static void walk(int from, int to, const char *shown, int depth);

/* the subdirectory `name` of `from` walked, made in `to` with its owner, mode and times (with the whiteouts
 * of links it holds: removed again when it holds none) */
static void walk_dir(int from, int to, const char *name, const char *shown, const struct stat *st, int depth)
{
    int src = openat(from, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0)
        return;
    int dst = mkdirat(to, name, 0700) == 0 ? openat(to, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (dst < 0) {
        close(src);
        return;
    }
    walk(src, dst, shown, depth + 1);
    struct timespec times[2] = {st->st_atim, st->st_mtim};
    if (!copying && unlinkat(to, name, AT_REMOVEDIR) == 0) { /* it holds no whiteout: the lower one shows */
    } else if (fchown(dst, st->st_uid, st->st_gid) != 0 || fchmod(dst, st->st_mode & 07777) != 0 ||
               futimens(dst, times) != 0) { /* best effort */
    }
    close(dst);
}

/* the directory `from` (a readable fd, consumed; shown as `shown`) into the directory `to` (left open): a link
 * naming a verifier place is reported, and no link is followed or copied; the overlay's upper directory gets a
 * whiteout for each link (the verifier's /tmp shows none of the agent's, so the tests' own files are made where
 * one was), a copy gets the directories and regular files, within the budget */
static void walk(int from, int to, const char *shown, int depth)
{
    DIR *d = fdopendir(from);
    if (!d) {
        close(from);
        return;
    }
    rewinddir(d); /* `from` may be a dup of a directory read before (it shares the offset) */
    for (struct dirent *e; visits < MAX_VISITS && (e = readdir(d)); visits++) {
        struct stat st;
        char sub[600], target[600];
        int wanted = copying || e->d_type == DT_DIR || e->d_type == DT_LNK || e->d_type == DT_UNKNOWN;
        if (!wanted || !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            fstatat(from, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* the overlay shows the agent's files as they are: only links and directories matter */
        snprintf(sub, sizeof sub, "%s/%s", shown, e->d_name);
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlinkat(from, e->d_name, target, sizeof target - 1);
            if (reporting && n > 0 && (target[n] = 0, names_verifier_place(target)))
                places_finding("verifier_place_written", sub, NULL);
            if (!copying && mknodat(to, e->d_name, S_IFCHR, makedev(0, 0)) != 0) { /* nosymfollow still holds */
            }
        } else if (S_ISREG(st.st_mode) && copying) {
            copy_file(from, to, e->d_name, &st);
        } else if (S_ISDIR(st.st_mode) && depth < PLACES_MAX_DEPTH) {
            walk_dir(from, to, e->d_name, sub, &st, depth);
        }
    }
    closedir(d);
}

/* one layer of the overlay being made: by fd, else (a kernel before 6.13) by its /proc/self/fd path */
static int layer(int fs, const char *key, const char *old_key, int dir)
{
    char path[64];
    if (sys_fsconfig_fd(fs, key, dir) == 0)
        return 0;
    snprintf(path, sizeof path, "/proc/self/fd/%d", dir);
    return sys_fsconfig(fs, FSCONFIG_SET_STRING, old_key, path);
}

/* the overlay view (a detached mount), or -1 */
static int overlay(long long bytes, int lower)
{
    char opts[64];
    snprintf(opts, sizeof opts, "size=%lld,mode=700", bytes);
    int space = detached("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    int ok = space >= 0 && mkdirat(space, "upper", 0) == 0 && fchmodat(space, "upper", 01777, 0) == 0 &&
             mkdirat(space, "work", 0700) == 0;
    int upper = ok ? openat(space, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    int work = ok ? openat(space, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (upper >= 0) {
        copying = 0;
        walk(dup(lower), upper, "/tmp", 0); /* the report, and a whiteout over each link */
        reporting = 0;
    }
    int fs = upper >= 0 && work >= 0 ? sys_fsopen("overlay") : -1;
    int m = -1;
    if (fs >= 0 && layer(fs, "lowerdir+", "lowerdir", lower) == 0 && layer(fs, "upperdir", "upperdir", upper) == 0 &&
        layer(fs, "workdir", "workdir", work) == 0 && sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL) == 0)
        m = sys_fsmount(fs, VIEW_ATTRS);
    int fds[] = {space, upper, work, fs};
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return m;
}

/* the fallback: a fresh tmpfs holding a bounded copy, or -1 */
static int copied(long long bytes, int lower)
{
    char opts[64];
    snprintf(opts, sizeof opts, "size=%lld,mode=1777", bytes);
    int m = detached("tmpfs", opts, VIEW_ATTRS);
    int to = m < 0 ? -1 : openat(m, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (to < 0) {
        if (m >= 0)
            close(m);
        return -1;
    }
    copy_left = COPY_BUDGET < bytes ? COPY_BUDGET : bytes;
    copying = 1;
    walk(dup(lower), to, "/tmp", 0);
    close(to);
    if (copy_cut)
        dprintf(2, "evsys: warning: the agent's /tmp was copied only up to %lld MiB (no overlay here)\n",
                COPY_BUDGET >> 20);
    return m;
}

int tmpview_mount(long long bytes)
{
    int lower = open("/tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (lower < 0)
        return -1;
    visits = copy_cut = 0, reporting = 1;
    int m = overlay(bytes, lower);
    if (m < 0) {
        visits = 0;
        m = copied(bytes, lower);
    }
    close(lower);
    return m;
}
