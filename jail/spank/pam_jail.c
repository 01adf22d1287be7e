/*
 * pam_jail: the session module of sshd on compute nodes. It moves the session into a mount
 * namespace of its own whose root is the jail, entered with pivot_root(2) and with the node's
 * root detached from it, as the jail plugin does for a job's tasks. Nothing of the node stays
 * reachable from the session, nor from anyone who can name one of its processes in /proc: with
 * sshd's ChrootDirectory the session's root was the jail directory inside the node's own mount
 * namespace, and /proc/<pid>/root/.. of a session process led a job step of the same user back
 * to the node's /.
 *
 * It runs in sshd's privileged process for the connection, after pam_slurm_adopt has put that
 * process into the job's cgroup and before sshd forks the user's side of the session, which
 * inherits the namespace: sshd's ChrootDirectory must then be none. The jail's runtime mounts
 * (a /proc that hides other users' processes, /dev, a read-only /sys, /tmp, the munge socket, the
 * client Slurm configuration: images/login/jail-mounts.sh) come along, since the jail is bound
 * with everything mounted below it. A session that cannot be put into the jail is refused.
 *
 * /etc/pam.d/sshd:  session required /usr/lib/slurmforge/pam/pam_jail.so root=/jail
 */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <syslog.h>
#include <unistd.h>

#include <security/pam_modules.h>

#define TAG "pam_jail"

static int enter(const char *root)
{
	const char *step = "unshare";

	if (unshare(CLONE_NEWNS) < 0)
		goto fail;
	/* nothing mounted from here on may propagate back to the node */
	step = "making / a slave mount";
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		goto fail;
	step = "binding the jail onto itself";
	if (mount(root, root, NULL, MS_BIND | MS_REC, NULL) < 0 || chdir(root) < 0)
		goto fail;
	step = "pivot_root";
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		goto fail;
	/* the node's root is stacked under the jail's: detached, it is gone from this namespace */
	step = "detaching the node's root";
	if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		goto fail;
	return 0;
fail:
	syslog(LOG_AUTHPRIV | LOG_ERR, TAG ": entering %s: %s: %m", root, step);
	return -1;
}

PAM_EXTERN int pam_sm_open_session(pam_handle_t *pamh, int flags, int argc, const char **argv)
{
	const char *root = "/jail";

	(void) pamh;
	(void) flags;
	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "root=", 5) && argv[i][5] == '/') {
			root = argv[i] + 5;
		} else {
			syslog(LOG_AUTHPRIV | LOG_ERR, TAG ": unknown option '%s' (expected root=DIR)",
			       argv[i]);
			return PAM_SESSION_ERR;
		}
	}
	return enter(root) ? PAM_SESSION_ERR : PAM_SUCCESS;
}

PAM_EXTERN int pam_sm_close_session(pam_handle_t *pamh, int flags, int argc, const char **argv)
{
	(void) pamh;
	(void) flags;
	(void) argc;
	(void) argv;
	return PAM_SUCCESS;
}
