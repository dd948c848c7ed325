/* Idmapped views of the cached lower layers, so every sandbox's agent has its own uid (docs/sandbox.md).
 *
 * The layers are built once, with the agent's files owned by LAYER_AGENT_UID (1000) on disk. Each sandbox's
 * agent runs as a uid of its own (allocated on the host, evsys.sandbox.local.uids), so that no kernel per-uid
 * quota (inotify instances, RLIMIT_NPROC, POSIX message queue bytes...) is shared between sandboxes or with a
 * host user. The overlay is mounted on idmapped clones of the layers in which on-disk uid/gid 1000 appears as
 * the sandbox's uid and 0 as 0 (anything else as the overflow id): the layers stay shared and are never
 * copied or chowned. A layer given as "=<dir>" is used as it is: a task image's own layers keep their owners
 * exactly (an image user with uid 1000, `postgres`, `www-data`...), only evsys's layers are idmapped.
 * Used by setup.c (first start) and reset.c (a fresh root between two trials). */
#include "evsysd.h"

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_LAYERS 64

static int write_map(pid_t pid, const char *file, const char *map)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, map, strlen(map));
    close(fd);
    return n == (ssize_t)strlen(map) ? 0 : -1;
}

/* a user namespace whose only mappings are 0 -> 0 and LAYER_AGENT_UID -> uid (for uids and gids); an fd to it.
 * A child born in the namespace (clone(CLONE_NEWUSER), no race with the map writes) holds it while we open it. */
static int mapping_userns(uid_t uid)
{
    int hold[2];
    if (pipe2(hold, O_CLOEXEC) != 0)
        return -1;
    pid_t child = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
    if (child == 0) {
        char byte;
        close(hold[1]);
        _exit(read(hold[0], &byte, 1) < 0);
    }
    close(hold[0]);
    int ns = -1;
    if (child > 0) {
        char map[64], path[64];
        snprintf(map, sizeof map, "0 0 1\n%d %u 1\n", LAYER_AGENT_UID, (unsigned)uid);
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
        if (write_map(child, "uid_map", map) == 0 && write_map(child, "setgroups", "deny") == 0 &&
            write_map(child, "gid_map", map) == 0)
            ns = open(path, O_RDONLY | O_CLOEXEC);
        int saved = errno;
        close(hold[1]); /* the child exits */
        waitpid(child, NULL, 0);
        errno = saved;
    } else {
        close(hold[1]);
    }
    return ns;
}

/* Every id this process's user namespace has, mapped to itself ("0 0 4294967295" on a host; the container's
 * ranges where evsys itself runs in a user namespace), as the text of a uid_map or gid_map. */
static int identity_map(const char *own, char *out, size_t size)
{
    FILE *f = fopen(own, "re");
    if (!f)
        return -1;
    unsigned long inside, outside, count;
    size_t used = 0;
    out[0] = 0;
    while (fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3) {
        int n = snprintf(out + used, size - used, "%lu %lu %lu\n", inside, inside, count);
        if (n < 0 || (size_t)n >= size - used)
            break;
        used += (size_t)n;
    }
    fclose(f);
    return used > 0 ? 0 : -1;
}

/* Enter a user namespace of the sandbox's own before bubblewrap starts (docs/sandbox.md, uids.py): it maps
 * every id to itself, so uids, file owners and the set*id filter are as without it, but it is owned by the
 * sandbox's agent uid. The kernel keys every ucounts-based per-user counter (inotify instances and watches,
 * RLIMIT_NPROC, POSIX message queue bytes, pending signals, locked memory) by (user namespace, uid) and charges
 * it up the chain to the namespace's owner: each sandbox's use of root, `nobody` or a system uid is counted in
 * its own namespace and, on the host, against its own uid alone, never against another sandbox's or host
 * root's. The namespace is made by a child that becomes `owner` first (the owner is the creator's euid); this
 * process, still root on the host, writes its maps and joins it, keeping the full set of ids (root inside is
 * uid 0 with capabilities in the new namespace only). */
int enter_owned_userns(uid_t owner)
{
    int ready[2], hold[2];
    if (pipe2(ready, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(hold, O_CLOEXEC) != 0) {
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    pid_t child = fork();
    if (child == 0) {
        char byte = 0;
        close(ready[0]);
        close(hold[1]);
        if (setgroups(0, NULL) != 0 || setresgid(owner, owner, owner) != 0 ||
            setresuid(owner, owner, owner) != 0 || unshare(CLONE_NEWUSER) != 0)
            _exit(1);
        if (write(ready[1], &byte, 1) != 1)
            _exit(1);
        _exit(read(hold[0], &byte, 1) < 0); /* holds the namespace until the parent has joined it */
    }
    close(ready[1]);
    close(hold[0]);
    int rc = -1;
    char byte, path[64];
    if (child > 0 && read(ready[0], &byte, 1) == 1) {
        char uids[4096], gids[4096];
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
        int ns = -1;
        if (identity_map("/proc/self/uid_map", uids, sizeof uids) == 0 &&
            identity_map("/proc/self/gid_map", gids, sizeof gids) == 0 &&
            write_map(child, "uid_map", uids) == 0 && write_map(child, "gid_map", gids) == 0)
            ns = open(path, O_RDONLY | O_CLOEXEC);
        rc = ns >= 0 && setns(ns, CLONE_NEWUSER) == 0 ? 0 : -1;
        int saved = errno;
        if (ns >= 0)
            close(ns);
        errno = saved;
    }
    int saved = errno;
    close(ready[0]);
    close(hold[1]);
    if (child > 0)
        waitpid(child, NULL, 0);
    errno = saved;
    return rc;
}

int idmapped_lowers(const char *lowers, uid_t uid, char *out, size_t size)
{
    int made = -1;
    int rc = idmapped_lowers_in(lowers, uid, -1, &made, out, size);
    if (made >= 0)
        close(made);
    return rc;
}

/* Creating the mapping namespace (a clone) is most of the cost of an idmapped root: a reset reuses the one
 * the orchestrator kept from the sandbox's previous reset (the mapping depends on the uid only). */
int idmapped_lowers_in(const char *lowers, uid_t uid, int ns, int *made, char *out, size_t size)
{
    *made = -1;
    if (ns < 0) {
        ns = *made = mapping_userns(uid);
        if (ns < 0)
            return -1;
    }
    char list[8192], *save = NULL;
    size_t used = 0;
    int count = 0, rc = 0;
    snprintf(list, sizeof list, "%s", lowers);
    out[0] = 0;
    for (char *dir = strtok_r(list, ":", &save); dir && rc == 0; dir = strtok_r(NULL, ":", &save)) {
        if (dir[0] == '=') { /* not idmapped */
            int n = snprintf(out + used, size - used, "%s%s", used ? ":" : "", dir + 1);
            if (n < 0 || (size_t)n >= size - used || ++count > MAX_LAYERS) {
                errno = E2BIG;
                rc = -1;
            }
            used += rc == 0 ? (size_t)n : 0;
            continue;
        }
        int tree = (int)syscall(SYS_open_tree, AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (unsigned long long)ns};
        if (tree < 0 || syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0 ||
            ++count > MAX_LAYERS) {
            rc = -1;
            break;
        }
        int n = snprintf(out + used, size - used, "%s/proc/self/fd/%d", used ? ":" : "", tree);
        if (n < 0 || (size_t)n >= size - used) {
            errno = E2BIG;
            rc = -1;
        }
        used += (size_t)n;
    }
    return rc;
}
