/* File operations done by the daemon itself, so placing tests or a solution and copying logs out start no
 * process (each rm, mkdir or tar is ~1 ms of CPU on a VM):
 *   {"op": "files", "id", "remove": [paths], "empty": [dirs], "mkdir": [dirs], "extract": dir|None}
 *     payload = a tar (ustar/pax) extracted into `extract`: removes (like rm -rf), empties (deletes the
 *     entries of a directory), creates (like mkdir -p, root-owned 0755), then extracts, in that order.
 *     Reply {"op": "done", "id"}, or an "error" frame naming what failed.
 *   {"op": "pack", "id", "path"}  reply {"op": "packed", "id", "out": n}, payload = a tar holding `path`
 *     under its base name (like `tar -c -C dirname basename`): regular files, directories, symlinks.
 * Everything runs as root inside the sandbox's own mount namespace, so nothing here can reach the host.
 * Inside an extracted tree no symlink is followed (a member cannot write through a link the tar made), and
 * member names that are absolute or contain `..` are refused, as `tar` itself refuses them. */
#include "evsysd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char errbuf[600];

static int fail(const char *what, const char *path)
{
    snprintf(errbuf, sizeof errbuf, "%s %.400s: %s", what, path, strerror(errno));
    return -1;
}

/* remove `name` under the directory fd `at` and everything below it, following no symlink */
static int remove_at(int at, const char *name)
{
    struct stat st;
    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = dir_at(at, name, O_NOFOLLOW);
        if (!d)
            return -1;
        struct dirent *e;
        int rc = 0;
        while ((e = next_entry(d)))
            if (remove_at(dirfd(d), e->d_name) != 0)
                rc = -1;
        closedir(d);
        if (rc != 0)
            return -1;
        return unlinkat(at, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
    }
    return unlinkat(at, name, 0) == 0 || errno == ENOENT ? 0 : -1;
}

static int remove_path(const char *path)
{
    return remove_at(AT_FDCWD, path) == 0 ? 0 : fail("cannot remove", path);
}

static int empty_dir(const char *path)
{
    DIR *d = dir_at(AT_FDCWD, path, 0);
    if (!d)
        return errno == ENOENT ? 0 : fail("cannot open", path);
    struct dirent *e;
    int rc = 0;
    while ((e = next_entry(d)))
        if (remove_at(dirfd(d), e->d_name) != 0)
            rc = fail("cannot empty", path);
    closedir(d);
    return rc;
}

/* like mkdir -p (root-owned, 0755 for what it creates) */
static int make_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return fail("cannot create", buf);
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return fail("cannot create", path);
    }
    return 0;
}

/* ---- tar extraction */
static unsigned long long octal(const char *p, size_t n)
{
    unsigned long long v = 0;
    for (size_t k = 0; k < n && p[k]; k++)
        if (p[k] >= '0' && p[k] <= '7')
            v = v * 8 + (unsigned long long)(p[k] - '0');
    return v;
}

/* the directory fd holding member `rel` under `root`, creating directories, following no symlink */
static int member_parent(int root, char *rel, char **leaf)
{
    int fd = dup(root);
    char *part = rel, *slash;
    while (fd >= 0 && (slash = strchr(part, '/'))) {
        *slash = 0;
        if (*part && strcmp(part, ".")) {
            if (mkdirat(fd, part, 0755) != 0 && errno != EEXIST) {
                close(fd);
                return -1;
            }
            int next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            close(fd);
            fd = next;
        }
        *slash = '/';
        part = slash + 1;
    }
    *leaf = part;
    return fd;
}

static int safe_name(const char *name)
{
    if (name[0] == '/')
        return 0;
    for (const char *p = name; *p;) {
        if (p[0] == '.' && p[1] == '.' && (p[2] == '/' || !p[2]))
            return 0;
        const char *slash = strchr(p, '/');
        p = slash ? slash + 1 : p + strlen(p);
    }
    return 1;
}

/* pax records "len key=value\n": path, linkpath and size override the next header's fields */
static void pax_records(const char *p, size_t n, char *path, char *link, unsigned long long *size)
{
    size_t off = 0;
    while (off < n) {
        char *end;
        unsigned long len = strtoul(p + off, &end, 10);
        if (len == 0 || off + len > n || *end != ' ')
            return;
        const char *kv = end + 1, *stop = p + off + len - 1; /* before the newline */
        const char *eq = memchr(kv, '=', (size_t)(stop - kv));
        if (eq) {
            size_t klen = (size_t)(eq - kv), vlen = (size_t)(stop - eq - 1);
            char *dst = klen == 4 && !memcmp(kv, "path", 4) ? path : klen == 8 && !memcmp(kv, "linkpath", 8) ? link : NULL;
            if (dst && vlen < 4096) {
                memcpy(dst, eq + 1, vlen);
                dst[vlen] = 0;
            } else if (klen == 4 && !memcmp(kv, "size", 4)) {
                *size = strtoull(eq + 1, NULL, 10);
            }
        }
        off += len;
    }
}

static int extract_member(int root, char type, char *name, const char *link, mode_t mode, time_t mtime,
                          const char *data, size_t size)
{
    if (!safe_name(name)) {
        errno = EPERM;
        return fail("refusing tar member", name);
    }
    char *leaf;
    int dir = member_parent(root, name, &leaf);
    if (dir < 0)
        return fail("cannot create the parent of", name);
    int rc = 0;
    if (!*leaf || !strcmp(leaf, ".")) { /* the extraction directory itself */
        if (type == '5')
            fchmod(dir, mode);
    } else if (type == '5') {
        if ((mkdirat(dir, leaf, mode) != 0 && errno != EEXIST) || fchmodat(dir, leaf, mode, 0) != 0)
            rc = fail("cannot create directory", name);
    } else if (type == '2' || type == '1') {
        unlinkat(dir, leaf, 0);
        int ok = type == '2' ? symlinkat(link, dir, leaf) : (safe_name(link) ? linkat(root, link, dir, leaf, 0) : -1);
        if (ok != 0)
            rc = fail("cannot create link", name);
    } else if (type == '0' || type == '\0' || type == '7') {
        unlinkat(dir, leaf, 0);
        int fd = openat(dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            rc = fail("cannot create", name);
        else {
            size_t off = 0;
            while (off < size) {
                ssize_t w = write(fd, data + off, size - off);
                if (w <= 0) {
                    rc = fail("cannot write", name);
                    break;
                }
                off += (size_t)w;
            }
            struct timespec times[2] = {{mtime, 0}, {mtime, 0}};
            if (rc == 0 && (fchmod(fd, mode) != 0 || futimens(fd, times) != 0))
                rc = fail("cannot set the mode of", name);
            close(fd);
        }
    } /* devices, fifos and the like are skipped */
    close(dir);
    return rc;
}

static int extract_tar(const char *dst, const char *tar, size_t len)
{
    int root = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return fail("cannot open", dst);
    int rc = extract_tar_at(root, tar, len);
    close(root);
    return rc;
}

/* extract the tar into the directory `root` (an fd, left open) */
int extract_tar_at(int root, const char *tar, size_t len)
{
    char path[4096] = "", link[4096] = "";
    unsigned long long pax_size = 0;
    int rc = 0;
    for (size_t off = 0; rc == 0 && off + 512 <= len; ) {
        const char *h = tar + off;
        if (!h[0]) /* the end-of-archive blocks */
            break;
        char type = h[156];
        unsigned long long size = pax_size ? pax_size : octal(h + 124, 12);
        size_t body = off + 512;
        if (body + size > len) {
            errno = EINVAL;
            rc = fail("truncated tar at", path[0] ? path : "a member");
            break;
        }
        if (type == 'x' || type == 'g') {
            if (type == 'x')
                pax_records(tar + body, (size_t)size, path, link, &pax_size);
            off = body + (size + 511) / 512 * 512;
            continue;
        }
        if (type == 'L' || type == 'K') { /* GNU long name / link */
            snprintf(type == 'L' ? path : link, 4096, "%.*s", (int)(size < 4095 ? size : 4095), tar + body);
            off = body + (size + 511) / 512 * 512;
            continue;
        }
        char name[4096];
        if (path[0])
            snprintf(name, sizeof name, "%s", path);
        else if (h[345])
            snprintf(name, sizeof name, "%.155s/%.100s", h + 345, h);
        else
            snprintf(name, sizeof name, "%.100s", h);
        if (!link[0])
            snprintf(link, sizeof link, "%.100s", h + 157);
        size_t n = strlen(name);
        while (n > 1 && name[n - 1] == '/')
            name[--n] = 0;
        rc = extract_member(root, type, name, link, (mode_t)(octal(h + 100, 8) & 07777),
                            (time_t)octal(h + 136, 12), tar + body, (size_t)size);
        path[0] = link[0] = 0;
        pax_size = 0;
        off = body + (size + 511) / 512 * 512;
    }
    return rc;
}

static int each_string(const value_t *v, const char *key, int (*fn)(const char *))
{
    value_t *list = d_get(v, key);
    for (size_t k = 0; list && list->t == V_LIST && k < list->n; k++)
        if (list->items[k]->t == V_STR && fn(list->items[k]->s) != 0)
            return -1;
    return 0;
}

static void reply(long long rid, const char *op, const void *payload, size_t plen)
{
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", op);
    m_kint(&h, "id", rid);
    if (payload)
        m_kint(&h, "out", (long long)plen);
    m_end(&h);
    send_frame(&h, payload, plen);
    buf_free(&h);
}

void files_op(const value_t *v, long long rid, const char *payload, size_t plen)
{
    const char *dst = d_str(v, "extract");
    errbuf[0] = 0;
    int rc = each_string(v, "remove", remove_path);
    if (rc == 0)
        rc = each_string(v, "empty", empty_dir);
    if (rc == 0)
        rc = each_string(v, "mkdir", make_dirs);
    if (rc == 0 && dst)
        rc = make_dirs(dst) == 0 ? extract_tar(dst, payload, plen) : -1;
    if (rc != 0)
        send_error(rid, 1, errbuf[0] ? errbuf : "file operation failed");
    else
        reply(rid, "done", NULL, 0);
}
