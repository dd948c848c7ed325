/* The new mount API (glibc 2.36 has wrappers, older ones do not: call the kernel directly), used by the reset
 * helper (reset.c), the setup step (setup.c) and the verifier's private mounts (verifier.c). */
#include "evsysd.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int sys_fsopen(const char *fs) { return (int)syscall(SYS_fsopen, fs, FSOPEN_CLOEXEC); }
int sys_fsconfig(int fd, unsigned cmd, const char *key, const char *value)
{
    return (int)syscall(SYS_fsconfig, fd, cmd, key, value, 0);
}
int sys_fsconfig_fd(int fd, const char *key, int value)
{
    return (int)syscall(SYS_fsconfig, fd, FSCONFIG_SET_FD, key, NULL, value);
}
int sys_fsmount(int fd, unsigned attrs) { return (int)syscall(SYS_fsmount, fd, FSMOUNT_CLOEXEC, attrs); }
int sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to, unsigned flags)
{
    return (int)syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags);
}
int make_readonly(const char *path)
{
    struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
    return (int)syscall(SYS_mount_setattr, AT_FDCWD, path, 0, &ro, sizeof ro);
}

/* a detached filesystem instance: fsopen, the options (key=value, comma-separated), create, fsmount */
int detached(const char *fs, const char *options, unsigned attrs)
{
    int fd = sys_fsopen(fs);
    if (fd < 0)
        return -1;
    char opts[512], *save = NULL;
    snprintf(opts, sizeof opts, "%s", options);
    for (char *kv = strtok_r(opts, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (eq)
            *eq = 0;
        if (sys_fsconfig(fd, eq ? FSCONFIG_SET_STRING : FSCONFIG_SET_FLAG, kv, eq ? eq + 1 : NULL) != 0) {
            close(fd);
            return -1;
        }
    }
    int m = sys_fsconfig(fd, FSCONFIG_CMD_CREATE, NULL, NULL) == 0 ? sys_fsmount(fd, attrs) : -1;
    close(fd);
    return m;
}

