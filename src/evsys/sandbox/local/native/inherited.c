/* What the daemon (the sandbox's pid 1) passes on to every command: its rlimits and three /proc entries
 * (oom_score_adj, coredump_filter, its autogroup's nice). The daemon reports them as it starts (its ready
 * frame, main.c); a reset puts back, from the host, whatever root inside changed since (reset.c), so the next
 * trial inherits nothing of the last one through pid 1.
 *
 * Root inside may change, without any capability, pid 1's rlimits (prlimit: the seccomp filter refuses it on
 * pid 1; a hard limit lowered anyway can be raised again only with CAP_SYS_RESOURCE, else the reset fails) and
 * those /proc entries. Its nice value, scheduling policy, cpu affinity and io priority cannot be changed from
 * inside: that needs CAP_SYS_NICE or pid 1's capabilities, which commands never hold.
 *
 * The format, in the ready frame and as the reset helper's arguments: "limits" is "soft hard" per resource
 * number, comma-separated, -1 for unlimited; each /proc entry is its text as read ("" when absent). */
#include "evsysd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* each /proc entry: its name, and how its text as read is written back (a prefix; the part after a marker) */
static const struct {
    const char *name, *prefix, *after;
} FILES[INHERITED_N] = {{"oom_score_adj", "", NULL}, {"coredump_filter", "0x", NULL}, {"autogroup", "", " nice "}};
/* resource numbers (asm-generic, as on x86-64 and arm64) -> names, for the reset's error */
static const char *const LIMITS[] = {"CPU",    "FSIZE",   "DATA",       "STACK",    "CORE", "RSS",
                                     "NPROC",  "NOFILE",  "MEMLOCK",    "AS",       "LOCKS", "SIGPENDING",
                                     "MSGQUEUE", "NICE",  "RTPRIO",     "RTTIME"};

static void read_at(int dir, const char *path, char *out, size_t size)
{
    int fd = openat(dir, path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, out, size - 1) : -1;
    if (fd >= 0)
        close(fd);
    out[n > 0 ? n : 0] = 0;
}

void add_inherited_state(buf_t *h)
{
    char limits[RLIM_NLIMITS * 48] = "", value[128];
    size_t used = 0;
    for (int r = 0; r < RLIM_NLIMITS; r++) {
        struct rlimit l = {RLIM_INFINITY, RLIM_INFINITY};
        getrlimit(r, &l);
        used += (size_t)snprintf(limits + used, sizeof limits - used, "%s%lld %lld", r ? "," : "",
                                 l.rlim_cur == RLIM_INFINITY ? -1LL : (long long)l.rlim_cur,
                                 l.rlim_max == RLIM_INFINITY ? -1LL : (long long)l.rlim_max);
    }
    m_kstr(h, "limits", limits);
    for (int k = 0; k < INHERITED_N; k++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/%s", FILES[k].name);
        read_at(AT_FDCWD, path, value, sizeof value);
        m_kstr(h, FILES[k].name, value);
    }
}

/* the value to write back to /proc entry `k` from its text as read (coredump_filter reads as hex without 0x,
 * autogroup as "/autogroup-<n> nice <nice>" and takes the nice alone) */
static void written_form(int k, const char *text, char *out, size_t size)
{
    const char *value = text;
    if (FILES[k].after) {
        value = strstr(text, FILES[k].after);
        value = value ? value + strlen(FILES[k].after) : "";
    }
    snprintf(out, size, "%s%s", FILES[k].prefix, value);
    out[strcspn(out, "\n")] = 0;
}

/* 0, or -1 with `problem` naming what (and errno why) */
static int put_back_limits(pid_t pid, const char *limits, char *problem, size_t size)
{
    char copy[RLIM_NLIMITS * 48], *save = NULL;
    snprintf(copy, sizeof copy, "%s", limits);
    int r = 0;
    for (char *item = strtok_r(copy, ",", &save); item && r < RLIM_NLIMITS; item = strtok_r(NULL, ",", &save), r++) {
        long long soft, hard;
        struct rlimit now;
        const char *name = r < (int)(sizeof LIMITS / sizeof *LIMITS) ? LIMITS[r] : "?";
        snprintf(problem, size, "RLIMIT_%s (resource %d)", name, r);
        if (sscanf(item, "%lld %lld", &soft, &hard) != 2)
            return errno = EINVAL, -1;
        struct rlimit want = {soft < 0 ? RLIM_INFINITY : (rlim_t)soft, hard < 0 ? RLIM_INFINITY : (rlim_t)hard};
        if (prlimit(pid, r, NULL, &now) != 0)
            return -1;
        if ((now.rlim_cur != want.rlim_cur || now.rlim_max != want.rlim_max) && prlimit(pid, r, &want, NULL) != 0)
            return -1;
    }
    return 0;
}

int restore_inherited(int proc, const char *pid, const char *limits, char *const files[INHERITED_N],
                      char *problem, size_t size)
{
    if (put_back_limits((pid_t)atoi(pid), limits, problem, size) != 0)
        return -1;
    for (int k = 0; k < INHERITED_N; k++) {
        char path[64], text[128], now[128], want[128];
        if (!files[k][0]) /* absent at start (no CONFIG_SCHED_AUTOGROUP) */
            continue;
        snprintf(path, sizeof path, "%s/%s", pid, FILES[k].name);
        snprintf(problem, size, "%s", FILES[k].name);
        read_at(proc, path, text, sizeof text);
        written_form(k, text, now, sizeof now);
        written_form(k, files[k], want, sizeof want);
        if (strcmp(now, want) == 0)
            continue;
        int fd = openat(proc, path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        ssize_t n = write(fd, want, strlen(want));
        int saved = errno;
        close(fd);
        if (n < 0)
            return errno = saved, -1;
    }
    return 0;
}
