/* What a verification run's child does with the sandbox's own places before it covers them (verifier.c):
 *
 * - it reports what the agent wrote there during this sandbox's life (a file whose ctime is at or past the
 *   request's "since", which no process can set back): entries of the sandbox's /tests and /logs/verifier, a
 *   link in /tmp that names a verifier place, a non-empty /etc/ld.so.preload. Each is one line on the run's
 *   stderr, `evsys-integrity: <kind> <path>`, before the command's own output goes to its file; the host turns
 *   them into IntegrityFindings (evsys.verify.script);
 * - the verifier's /tmp shows the agent's without following any link in it (tmpview.c);
 * - /etc/ld.so.preload is covered by a file of the verifier's own (a one-file bind in its mount namespace,
 *   which no other process can see): empty when the agent wrote it, else what the image had there, so no
 *   library the agent named loads into the tests' processes. */
#include "evsysd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_REPORTED 64
#define PRELOAD_MAX 4096

static int reported;

/* one finding on stderr (the run's, before its output is redirected); the path's odd bytes as '?' */
void places_finding(const char *kind, const char *dir, const char *leaf)
{
    char path[600];
    snprintf(path, sizeof path, "%s%s%s", dir, leaf && *leaf ? "/" : "", leaf ? leaf : "");
    for (char *p = path; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
            *p = '?';
    if (reported++ < MAX_REPORTED)
        dprintf(2, "evsys-integrity: %s %s\n", kind, path);
}

static int written_since(const struct stat *st, double since)
{
    return since > 0 && (double)st->st_ctim.tv_sec + st->st_ctim.tv_nsec / 1e9 >= since;
}

/* every entry of the directory `fd` (consumed; shown as `path`) written since `since`, as
 * verifier_place_written; never through a link */
static void scan_written(int fd, const char *path, double since, int depth)
{
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        char sub[600];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (written_since(&st, since))
            places_finding("verifier_place_written", sub, NULL);
        else if (S_ISDIR(st.st_mode) && depth < PLACES_MAX_DEPTH)
            scan_written(openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), sub, since,
                         depth + 1);
    }
    closedir(d);
}

void places_report(double since, int tests)
{
    struct stat st;
    reported = 0;
    if (lstat(VERIFIER_LOGS, &st) == 0 && !S_ISDIR(st.st_mode)) /* a link or file in its place */
        places_finding("verifier_place_written", VERIFIER_LOGS, NULL);
    if (tests >= 0)
        scan_written(dup(tests), "/tests", since, 0);
    scan_written(open(VERIFIER_LOGS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), VERIFIER_LOGS, since, 0);
}

/* what the verifier's /etc/ld.so.preload holds (into buf, its length): the image's content, or nothing when the
 * agent wrote or replaced the file (reported as preload_planted) */
static size_t preload_content(double since, char *buf)
{
    struct stat st;
    if (lstat("/etc/ld.so.preload", &st) != 0)
        return 0;
    if (!S_ISREG(st.st_mode) || since <= 0 || written_since(&st, since)) { /* no start time: none kept */
        if (since > 0 && (!S_ISREG(st.st_mode) || st.st_size > 0))
            places_finding("preload_planted", "/etc/ld.so.preload", NULL);
        return 0;
    }
    int fd = open("/etc/ld.so.preload", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    ssize_t n = fd < 0 ? 0 : read(fd, buf, PRELOAD_MAX);
    if (fd >= 0)
        close(fd);
    return n > 0 ? (size_t)n : 0;
}

/* the sandbox's /etc/ld.so.preload as a regular file to mount on (O_PATH; a link or other non-file the agent
 * put there is replaced by an empty file; made when missing) */
static int preload_target(int etc)
{
    int fd = openat(etc, "ld.so.preload", O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        return fd;
    if (fd >= 0) {
        close(fd);
        if (unlinkat(etc, "ld.so.preload", 0) != 0 && unlinkat(etc, "ld.so.preload", AT_REMOVEDIR) != 0)
            return -1;
    }
    int made = openat(etc, "ld.so.preload", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (made < 0)
        return -1;
    close(made);
    return openat(etc, "ld.so.preload", O_PATH | O_NOFOLLOW | O_CLOEXEC);
}

int places_cover_preload(double since, int tmp)
{
    static const char leaf[] = ".evsys-ld.so.preload";
    char content[PRELOAD_MAX];
    size_t len = preload_content(since, content);
    int etc = open("/etc", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int target = etc < 0 ? -1 : preload_target(etc);
    unlinkat(tmp, leaf, 0); /* a file of that name the agent left in its /tmp */
    int file = openat(tmp, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    int ok = file >= 0 && (len == 0 || write(file, content, len) == (ssize_t)len);
    int bind = ok ? (int)syscall(SYS_open_tree, tmp, leaf, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC) : -1;
    int rc = bind >= 0 && target >= 0
                 ? sys_move_mount(bind, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)
                 : -1;
    if (file >= 0)
        unlinkat(tmp, leaf, 0); /* the bind keeps the file; the verifier's /tmp does not show it */
    int fds[] = {etc, target, file, bind};
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}
