/* Processes and privileges: hardening the daemon itself, killing everything, killing one process tree. */
#include "evsysd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID: what "root" commands keep */
static const int KEEP_CAPS[] = {0, 1, 3, 4, 5, 6, 7};
#define N_KEEP (sizeof KEEP_CAPS / sizeof *KEEP_CAPS)

static int kept(int cap)
{
    for (size_t k = 0; k < N_KEEP; k++)
        if (KEEP_CAPS[k] == cap)
            return 1;
    return 0;
}

/* no_new_privs, the small capability set, then non-dumpable (so reading /proc/1 needs CAP_SYS_PTRACE).
 * The bounding set is the small set, so no command ever gets more; the daemon itself also keeps CAP_SYS_ADMIN
 * (a verification run's child makes its private mounts with it, verifier.c; never inheritable, so no exec
 * keeps it) and the verification mark (CAP_WAKE_ALARM, inheritable: only a verification run keeps it). */
void harden(void)
{
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    for (int cap = 0; cap < 64; cap++)
        if (!kept(cap) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            die("cannot drop a capability from the bounding set");
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    uint32_t keep = 0;
    for (size_t k = 0; k < N_KEEP; k++)
        keep |= 1u << KEEP_CAPS[k];
    uint32_t mark = 1u << (CAP_WAKE_ALARM - 32);
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {{keep | 1u << CAP_SYS_ADMIN, keep | 1u << CAP_SYS_ADMIN, keep},
                                             {mark, mark, mark}};
    if (syscall(SYS_capset, &hdr, data) != 0)
        die("capset failed");
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* after capset, which could reset it */
}

void killpg_quiet(pid_t pgid)
{
    if (pgid > 0)
        kill(-pgid, SIGKILL);
}

unsigned long long free_bytes(const char *path)
{
    struct statvfs st;
    if (statvfs(path, &st) != 0)
        return 0;
    return (unsigned long long)st.f_bavail * st.f_frsize;
}

typedef struct {
    pid_t pid, ppid, pgrp, sid;
} proc_t;

/* every live (not zombie) process: pid, parent, group, session; returns the count (at most max) */
static size_t process_table(proc_t *out, size_t max)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    char path[300], stat[512];
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, stat, sizeof stat - 1);
        close(fd);
        if (len <= 0)
            continue;
        stat[len] = 0;
        char *paren = strrchr(stat, ')'), state;
        proc_t p = {.pid = atoi(e->d_name)};
        if (!paren || sscanf(paren + 2, "%c %d %d %d", &state, &p.ppid, &p.pgrp, &p.sid) != 4)
            continue;
        if (state != 'Z' && state != 'X')
            out[n++] = p;
    }
    closedir(d);
    return n;
}

#define MAX_PROCS 65536
static proc_t table[MAX_PROCS];

static void sleep_ms(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

/* SIGKILL every other process in this pid namespace; wait (5 s at most) until they are gone; return the count
 * (the persistent workers, killed too, are not counted); *left: how many are still alive after that */
int kill_all(int *left_out)
{
    *left_out = 0;
    pid_t me = getpid();
    size_t n = process_table(table, MAX_PROCS);
    int victims = 0;
    for (size_t k = 0; k < n; k++) {
        int worker = 0;
        for (worker_t *w = workers; w && !worker; w = w->next)
            worker = w->pid == table[k].pid;
        victims += table[k].pid != 1 && table[k].pid != me && !worker;
    }
    if (!victims)
        return 0;
    double deadline = now_mono() + 5.0;
    while (now_mono() < deadline) {
        kill(-1, SIGKILL);
        n = process_table(table, MAX_PROCS);
        int left = 0;
        for (size_t k = 0; k < n; k++)
            left += table[k].pid != 1 && table[k].pid != me;
        *left_out = left;
        if (!left)
            break;
        sleep_ms();
    }
    return victims;
}

/* SIGKILL `root`, its descendants and every process in its group or session, until none is left (2 s) */
void kill_tree(pid_t root)
{
    static char found[MAX_PROCS];
    pid_t me = getpid();
    double deadline = now_mono() + 2.0;
    while (now_mono() < deadline) {
        size_t n = process_table(table, MAX_PROCS), victims = 0;
        memset(found, 0, n);
        for (size_t k = 0; k < n; k++)
            found[k] = table[k].pid == root || table[k].pgrp == root || table[k].sid == root;
        for (int changed = 1; changed;) {
            changed = 0;
            for (size_t k = 0; k < n; k++) {
                if (found[k])
                    continue;
                for (size_t j = 0; j < n; j++)
                    if (found[j] && table[j].pid == table[k].ppid) {
                        found[k] = changed = 1;
                        break;
                    }
                if (!found[k] && table[k].ppid == root)
                    found[k] = changed = 1;
            }
        }
        for (size_t k = 0; k < n; k++)
            if (found[k] && table[k].pid != 1 && table[k].pid != me) {
                kill(table[k].pid, SIGKILL);
                victims++;
            }
        if (!victims)
            return;
        sleep_ms();
    }
}

/* ---- the cgroup scopes of the daemon's children (cgsetup.py): cgroup.procs files the setup step opened as
 * host root, inherited through bwrap; [0] the agent's, [1] the verifier's (one per nested hierarchy) */
static int scope_fds[2][4];
static int scope_n[2];

void cgroup_scopes(const char *arg)
{
    int scope = 0;
    for (const char *p = arg; *p;) {
        if (*p == '/' || *p == ',') {
            scope += *p == '/';
            p++;
            continue;
        }
        char *end;
        long fd = strtol(p, &end, 10);
        if (end == p || fd < 3 || scope > 1 || scope_n[scope] >= 4 || fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0)
            die("malformed cgroup scopes");
        scope_fds[scope][scope_n[scope]++] = (int)fd;
        p = end;
    }
}

/* in a child before it execs: move it into the agent's or the verifier's cgroups; 0, or -1 with errno */
int join_scope(int verifier)
{
    for (int k = 0; k < scope_n[verifier]; k++)
        if (write(scope_fds[verifier][k], "0", 1) != 1)
            return -1;
    return 0;
}
