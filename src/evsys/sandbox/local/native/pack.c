/* The "pack" op (see files.c): a tar of one sandbox path, written by the daemon without starting `tar`.
 * ustar headers, with a pax record for names or link targets that do not fit; no symlink is followed.
 * And the "read" op: the tail of one file. */
#include "evsysd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEPTH 128 /* deeper directories are never copied: each level costs stack and an open fd */
#define FLUSH_AT (256u << 10) /* packed bytes are sent as "out" frames of this size: the daemon holds no more */
#define MAX_CUT_LINES 20      /* the report names this many cut entries, then counts the rest */
#define MAX_FIRST 8

/* one pack in progress: the bounds (see evsys.sandbox.copyout) and what was spent and cut so far */
typedef struct {
    long long rid;
    buf_t b;                       /* bytes not yet sent */
    unsigned long long sent;       /* bytes already sent */
    unsigned long long max_bytes, max_file;
    long long entries, max_entries, ncut;
    int max_depth, full;           /* full: the entry or byte cap was reached, nothing more is added */
    buf_t cut;                     /* the report: one "name: why" line per cut entry */
    const char *first[MAX_FIRST];  /* names (relative to the packed root) packed before everything else */
    int nfirst, phase;             /* first[0..phase) are done: the tree walk skips them */
    size_t root_len;               /* strlen of the root's own name, to make names relative */
    const char *mapped;            /* the name of /logs/verifier, read from the verifier's private logs */
} pack_t;

static void pad(buf_t *b)
{
    static const char zeros[512];
    buf_add(b, zeros, (512 - b->n % 512) % 512);
}

static void pax_record(buf_t *rec, const char *key, const char *value)
{
    size_t body = strlen(key) + strlen(value) + 3; /* " " "=" "\n" */
    size_t len = body + 1;
    char num[24];
    while ((size_t)snprintf(num, sizeof num, "%zu", len) + body != len)
        len = (size_t)snprintf(num, sizeof num, "%zu", len) + body;
    buf_addstr(rec, num);
    buf_add(rec, " ", 1);
    buf_addstr(rec, key);
    buf_add(rec, "=", 1);
    buf_addstr(rec, value);
    buf_add(rec, "\n", 1);
}

static void header(buf_t *b, const char *name, const struct stat *st, char type, const char *link,
                   unsigned long long size)
{
    char h[512];
    if (strlen(name) > 99 || strlen(link) > 99) {
        buf_t rec = {0};
        if (strlen(name) > 99)
            pax_record(&rec, "path", name);
        if (strlen(link) > 99)
            pax_record(&rec, "linkpath", link);
        struct stat xs = *st;
        xs.st_mode = 0644;
        header(b, "././@PaxHeader", &xs, 'x', "", rec.n);
        buf_add(b, rec.p, rec.n);
        pad(b);
        buf_free(&rec);
    }
    memset(h, 0, sizeof h);
    snprintf(h, 100, "%s", name);
    snprintf(h + 100, 8, "%07o", (unsigned)(st->st_mode & 07777));
    snprintf(h + 108, 8, "%07o", (unsigned)st->st_uid & 07777777);
    snprintf(h + 116, 8, "%07o", (unsigned)st->st_gid & 07777777);
    snprintf(h + 124, 12, "%011llo", size);
    snprintf(h + 136, 12, "%011llo", (unsigned long long)(st->st_mtime > 0 ? st->st_mtime : 0) & 077777777777ull);
    h[156] = type;
    snprintf(h + 157, 100, "%s", link);
    memcpy(h + 257, "ustar\0" "00", 8);
    const char *owner = st->st_uid == 0 ? "root" : st->st_uid == AGENT_UID ? "agent" : "";
    const char *group = st->st_gid == 0 ? "root" : st->st_gid == AGENT_UID ? "agent" : "";
    snprintf(h + 265, 32, "%s", owner);
    snprintf(h + 297, 32, "%s", group);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int k = 0; k < 512; k++)
        sum += (unsigned char)h[k];
    snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    buf_add(b, h, 512);
}

static void cut(pack_t *pk, const char *name, const char *fmt, unsigned long long a, unsigned long long b)
{
    if (pk->ncut++ >= MAX_CUT_LINES)
        return;
    char line[600], why[200];
    snprintf(why, sizeof why, fmt, a, b);
    snprintf(line, sizeof line, "%.380s: %s\n", name, why);
    buf_addstr(&pk->cut, line);
}

static unsigned long long spent(const pack_t *pk)
{
    return pk->sent + pk->b.n;
}

/* sends whole 512-byte blocks only and keeps the rest, so the buffer's offset stays the stream's modulo 512
 * (what pad() aligns to) however a file's data falls across flushes */
static void flush(pack_t *pk)
{
    size_t n = pk->b.n - pk->b.n % 512;
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", "out");
    m_kint(&h, "id", pk->rid);
    m_kint(&h, "fd", 1);
    m_end(&h);
    send_frame(&h, pk->b.p, n);
    buf_free(&h);
    pk->sent += n;
    buf_consume(&pk->b, n);
}

/* room for one more entry whose header (pax record included) takes up to `head` bytes, keeping 1024 for
 * the end of the archive; 0 (and the pack is full) when there is none */
static int admit(pack_t *pk, const char *name, unsigned long long head)
{
    if (pk->full)
        return 0;
    if (pk->b.n >= FLUSH_AT)
        flush(pk);
    if (pk->entries >= pk->max_entries) {
        pk->full = 1;
        cut(pk, name, "the entry cap (%llu) was reached here: this and everything after it was not copied",
            (unsigned long long)pk->max_entries, 0);
        return 0;
    }
    if (spent(pk) + head + 1024 > pk->max_bytes) {
        pk->full = 1;
        cut(pk, name, "the byte cap (%llu) was reached here: this and everything after it was not copied",
            pk->max_bytes, 0);
        return 0;
    }
    pk->entries++;
    return 1;
}

static unsigned long long header_cost(const char *name, const char *link)
{
    /* a pax header and its records (padded), then the ustar header */
    return 512 + (strlen(name) > 99 || strlen(link) > 99 ? 1536 + strlen(name) + strlen(link) : 0);
}

/* how much of a regular file is copied: its size, cut by the single-file cap, by what is left of the byte cap,
 * and for a sparse file (far fewer bytes allocated than its size) by what is allocated: holes never inflate */
static unsigned long long file_take(pack_t *pk, const char *name, const struct stat *st, unsigned long long head)
{
    unsigned long long size = (unsigned long long)st->st_size, take = size;
    unsigned long long allocated = (unsigned long long)st->st_blocks * 512;
    if (size > (1u << 20) && allocated < size / 2 && allocated < take) {
        take = allocated;
        cut(pk, name, "a sparse file of %llu bytes (%llu allocated): only its head was copied", size, allocated);
    }
    if (take > pk->max_file) {
        cut(pk, name, "%llu bytes, over the single-file cap: cut to %llu", size, pk->max_file);
        take = pk->max_file;
    }
    unsigned long long left = pk->max_bytes - spent(pk) - head - 1024;
    left -= left % 512;
    if (take > left) {
        cut(pk, name, "%llu bytes, over what was left of the byte cap: cut to %llu", size, left);
        take = left;
    }
    return take;
}

static int pack_file(pack_t *pk, int dirfd, const char *leaf, const char *name, const struct stat *st)
{
    int fd = openat(dirfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC); /* swapped for a FIFO: no block */
    if (fd < 0)
        return errno == ENOENT ? 0 : -1; /* gone since it was listed */
    unsigned long long head = header_cost(name, "");
    if (!admit(pk, name, head)) {
        close(fd);
        return 0;
    }
    unsigned long long want = file_take(pk, name, st, head), done = 0;
    header(&pk->b, name, st, '0', "", want);
    static char chunk[CHUNK]; /* not on the stack: pack_at recurses (the daemon is single-threaded) */
    while (done < want) {
        size_t n = want - done < sizeof chunk ? (size_t)(want - done) : sizeof chunk;
        ssize_t got = read(fd, chunk, n);
        if (got <= 0) { /* it shrank: keep the header's size */
            memset(chunk, 0, n);
            got = (ssize_t)n;
        }
        buf_add(&pk->b, chunk, (size_t)got);
        done += (unsigned long long)got;
        if (pk->b.n >= FLUSH_AT)
            flush(pk);
    }
    close(fd);
    pad(&pk->b);
    return 0;
}

static int skipped_first(const pack_t *pk, const char *name)
{
    const char *rel = strlen(name) > pk->root_len ? name + pk->root_len + 1 : "";
    for (int k = 0; k < pk->phase; k++)
        if (strcmp(rel, pk->first[k]) == 0)
            return 1;
    return 0;
}

static int pack_at(pack_t *pk, int at, const char *leaf, const char *name, int depth)
{
    struct stat st;
    if (pk->full)
        return 0;
    if (pk->mapped && strcmp(name, pk->mapped) == 0) /* never the sandbox's own /logs/verifier */
        at = verifier_logs_fd, leaf = ".";
    if (fstatat(at, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (S_ISREG(st.st_mode))
        return pack_file(pk, at, leaf, name, &st);
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlinkat(at, leaf, target, sizeof target - 1);
        if (n < 0)
            return -1;
        target[n] = 0;
        if (admit(pk, name, header_cost(name, target)))
            header(&pk->b, name, &st, '2', target, 0);
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return 0; /* fifos, sockets, devices: not copied */
    if (depth > pk->max_depth) {
        cut(pk, name, "a directory deeper than the depth cap (%llu levels): not copied",
            (unsigned long long)pk->max_depth, 0);
        return 0;
    }
    char dname[4200];
    snprintf(dname, sizeof dname, "%s/", name);
    if (!admit(pk, dname, header_cost(dname, "")))
        return 0;
    header(&pk->b, dname, &st, '5', "", 0);
    DIR *d = dir_at(at, leaf, O_NOFOLLOW);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && !pk->full && (e = next_entry(d))) {
        char child[4200];
        snprintf(child, sizeof child, "%s/%s", name, e->d_name);
        if (!skipped_first(pk, child))
            rc = pack_at(pk, dirfd(d), e->d_name, child, depth + 1);
    }
    closedir(d);
    return rc;
}

/* pack root/rel (a "first" name: "leaf" or "dir/leaf", no "..") if it exists; no symlink is followed */
static int pack_first(pack_t *pk, int rootfd, const char *root, const char *rel)
{
    char parent[4096], name[4200];
    snprintf(parent, sizeof parent, "%s", rel);
    char *slash = strchr(parent, '/');
    if (strstr(rel, "..") || (slash && strchr(slash + 1, '/')))
        return 0;
    int fd = rootfd;
    if (slash) {
        *slash = 0;
        snprintf(name, sizeof name, "%s/%s", root, parent);
        int mapped = pk->mapped && strcmp(name, pk->mapped) == 0;
        fd = openat(mapped ? verifier_logs_fd : rootfd, mapped ? "." : parent,
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return 0;
    }
    snprintf(name, sizeof name, "%s/%s", root, rel);
    int rc = pack_at(pk, fd, slash ? slash + 1 : parent, name, slash ? 2 : 1);
    if (fd != rootfd)
        close(fd);
    return rc;
}

static void pack_limits(pack_t *pk, const value_t *v)
{
    long long mb = d_int(v, "max_bytes", 0), mf = d_int(v, "max_file_bytes", 0);
    long long me = d_int(v, "max_entries", 0), md = d_int(v, "max_depth", 0);
    pk->max_bytes = mb > 0 ? (unsigned long long)mb : ~0ull >> 1;
    pk->max_file = mf > 0 ? (unsigned long long)mf : ~0ull >> 1;
    pk->max_entries = me > 0 ? me : (long long)(~0ull >> 1);
    pk->max_depth = md > 0 && md < MAX_DEPTH ? (int)md : MAX_DEPTH;
    value_t *first = d_get(v, "first");
    for (size_t k = 0; first && first->t == V_LIST && k < first->n && pk->nfirst < MAX_FIRST; k++)
        if (first->items[k]->t == V_STR && first->items[k]->s[0] && first->items[k]->s[0] != '/')
            pk->first[pk->nfirst++] = first->items[k]->s;
}

/* {"op": "pack", "id", "path", "max_bytes", "max_entries", "max_depth", "max_file_bytes", "first": [names]}:
 * "out" frames with the tar, then {"op": "packed", "id", "out": n, "size": total, "cut": report,
 * "cut_count": n} with the rest. The caps (absent: none) are enforced while packing, so what is over them
 * is never read; "first" names (relative to the path) are packed before the rest. */
void pack_op(const value_t *v, long long rid)
{
    const char *path = d_str(v, "path");
    char msg[600], a[4096], c[4096];
    if (!path || path[0] != '/' || strlen(path) >= sizeof a) {
        send_error(rid, 1, "pack needs an absolute path");
        return;
    }
    snprintf(a, sizeof a, "%s", path);
    snprintf(c, sizeof c, "%s", path);
    const char *parent = dirname(a), *base = basename(c);
    int dirfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const char *mapped = NULL; /* after a verification run, its private logs stand for /logs/verifier */
    if (verifier_logs_fd >= 0 && strcmp(path, "/logs") == 0)
        mapped = "logs/verifier";
    else if (verifier_logs_fd >= 0 && strcmp(path, VERIFIER_LOGS) == 0)
        mapped = "verifier";
    int self = mapped && strcmp(mapped, base) == 0;
    struct stat st;
    if (dirfd < 0 || fstatat(self ? verifier_logs_fd : dirfd, self ? "." : base, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        snprintf(msg, sizeof msg, "cannot pack %.400s: %s", path, strerror(errno));
        if (dirfd >= 0)
            close(dirfd);
        send_error(rid, 1, msg);
        return;
    }
    pack_t pk = {.rid = rid, .root_len = strlen(base), .mapped = mapped};
    pack_limits(&pk, v);
    int rc = 0;
    if (pk.nfirst && S_ISDIR(st.st_mode)) { /* the first names, then the rest (which skips them) */
        int rootfd = openat(self ? verifier_logs_fd : dirfd, self ? "." : base,
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        for (; rootfd >= 0 && rc == 0 && pk.phase < pk.nfirst; pk.phase++)
            rc = pack_first(&pk, rootfd, base, pk.first[pk.phase]);
        if (rootfd >= 0)
            close(rootfd);
    }
    if (rc == 0)
        rc = pack_at(&pk, dirfd, base, base, 0);
    int saved = errno;
    close(dirfd);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "cannot pack %.400s: %s", path, strerror(saved));
        send_error(rid, 1, msg);
    } else {
        static const char end[1024];
        buf_add(&pk.b, end, sizeof end);
        buf_add(&pk.cut, "", 1);
        buf_t h = {0};
        m_begin(&h);
        m_kstr(&h, "op", "packed");
        m_kint(&h, "id", rid);
        m_kint(&h, "out", (long long)pk.b.n);
        m_kint(&h, "size", (long long)spent(&pk));
        m_kstr(&h, "cut", pk.cut.p);
        m_kint(&h, "cut_count", pk.ncut);
        m_end(&h);
        send_frame(&h, pk.b.p, pk.b.n);
        buf_free(&h);
    }
    buf_free(&pk.b);
    buf_free(&pk.cut);
}

/* {"op": "read", "id", "path", "max"}: reply {"op": "data", "id", "out": n, "size": total}, payload = the
 * last `max` bytes of a regular file (all of it when smaller); what `tail -c` gives, without a process */
void read_op(const value_t *v, long long rid)
{
    const char *path = d_str(v, "path");
    long long max = d_int(v, "max", 1 << 20);
    char msg[600];
    int fd = path ? verifier_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1; /* a FIFO: no block */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || max < 0) {
        snprintf(msg, sizeof msg, "cannot read %.400s: %s", path ? path : "(no path)",
                 fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        send_error(rid, 1, msg);
        return;
    }
    size_t want = (unsigned long long)st.st_size < (unsigned long long)max ? (size_t)st.st_size : (size_t)max;
    buf_t b = {0};
    buf_add(&b, "", 0);
    char chunk[CHUNK];
    off_t off = st.st_size - (off_t)want;
    while (b.n < want) {
        ssize_t n = pread(fd, chunk, want - b.n < sizeof chunk ? want - b.n : sizeof chunk, off + (off_t)b.n);
        if (n <= 0)
            break;
        buf_add(&b, chunk, (size_t)n);
    }
    close(fd);
    buf_t h = {0};
    m_begin(&h);
    m_kstr(&h, "op", "data");
    m_kint(&h, "id", rid);
    m_kint(&h, "out", (long long)b.n);
    m_kint(&h, "size", (long long)st.st_size);
    m_end(&h);
    send_frame(&h, b.p, b.n);
    buf_free(&h);
    buf_free(&b);
}
