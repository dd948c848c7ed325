/* A reset sandbox's network namespace made a fresh one's again (reset.c, step 1), on the host, once the daemon
 * has killed every other process in the sandbox:
 *  - every TCP socket left in it is destroyed (SOCK_DESTROY over sock_diag, as `ss -K` does): TIME_WAIT,
 *    closing and orphaned ones that outlive the processes that had them; the peer of a live one gets a reset;
 *  - its connection tracking table is flushed (best effort: absent when no rule ever used conntrack there), so
 *    the allowlist's "established" rule never lets the next trial through on a flow of the last one.
 * Listening, UDP and unix sockets need nothing: they close with the last process holding them. The caller has
 * entered the namespace (setns through the daemon's pidfd). */
#include "evsysd.h"

#include <linux/inet_diag.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    struct nlmsghdr h;
    struct inet_diag_req_v2 r;
} diag_req_t;

/* send one request and read its answer: 0 when acknowledged without error */
static int ask(int nl, void *msg, size_t len)
{
    char buf[1024];
    if (send(nl, msg, len, 0) < 0)
        return -1;
    ssize_t n = recv(nl, buf, sizeof buf, 0);
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    if (n < (ssize_t)sizeof *h || h->nlmsg_type != NLMSG_ERROR)
        return -1;
    return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
}

static void destroy(int killer, const struct inet_diag_msg *found)
{
    diag_req_t req = {0};
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DESTROY;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    req.r.sdiag_family = found->idiag_family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = ~0u;
    req.r.id = found->id;
    ask(killer, &req, sizeof req); /* gone meanwhile (ENOENT) is as good */
}

/* destroy every TCP socket of one address family: how many were found, -1 when they cannot be listed */
static int destroy_family(int lister, int killer, int family)
{
    diag_req_t req = {0};
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.r.sdiag_family = (unsigned char)family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = ~0u;
    if (send(lister, &req, sizeof req, 0) < 0)
        return -1;
    static char buf[32768];
    int found = 0;
    for (;;) {
        ssize_t n = recv(lister, buf, sizeof buf, 0);
        if (n < 0)
            return -1;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE)
                return found;
            if (h->nlmsg_type == NLMSG_ERROR)
                return -1;
            destroy(killer, NLMSG_DATA(h));
            found++;
        }
    }
}

static void flush_conntrack(void)
{
    int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    if (nl < 0)
        return;
    struct {
        struct nlmsghdr h;
        struct nfgenmsg g;
    } req = {0};
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    req.g.nfgen_family = AF_UNSPEC; /* no tuple given: every entry of every family */
    req.g.version = NFNETLINK_V0;
    ask(nl, &req, sizeof req);
    close(nl);
}

/* 0 when no TCP socket is left (or none could be listed: the caller counts them again), -1 on an error */
int fresh_network(void)
{
    int lister = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    int killer = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    int rc = lister < 0 || killer < 0 ? -1 : 0;
    /* a dump walks the hash tables as they change under it: list again until a pass finds nothing */
    for (int pass = 0, found = 1; rc == 0 && found > 0 && pass < 4; pass++) {
        int v4 = destroy_family(lister, killer, AF_INET), v6 = v4 < 0 ? -1 : destroy_family(lister, killer, AF_INET6);
        rc = v4 < 0 || v6 < 0 ? -1 : 0;
        found = v4 + v6;
    }
    if (lister >= 0)
        close(lister);
    if (killer >= 0)
        close(killer);
    flush_conntrack();
    return rc;
}
