/*
 * slurmforge_jail: run every task of a job step inside the shared-root jail.
 *
 * slurmstepd forks one child per task; in that child, before privileges are dropped, this plugin
 * gives the task a private mount namespace, assembles the jail's runtime mounts (a fresh /proc that
 * hides other users' processes, the node's /dev, a read-only /sys, a private /tmp, the munge socket,
 * the client Slurm configuration, the batch script's spool directory) and pivots into the jail.
 * slurmd and slurmstepd never enter it, so nothing of theirs is visible at its path inside.
 *
 * plugstack.conf:
 *   required /usr/lib/slurmforge/spank/jail.so root=/jail conf=/etc/slurmforge/jail/slurm
 * options:
 *   root=DIR   the jail's mount point on the node (default /jail)
 *   conf=DIR   directory bound read-only onto the jail's /etc/slurm (default: none)
 *   spool=DIR  the node's SlurmdSpoolDir (default /var/spool/slurmd)
 *   local=DIR  node-local scratch for container roots (default: none). Each task makes
 *              DIR/<uid> for the job's user (0700, theirs; DIR itself stays root's) and binds DIR
 *              at the same path inside the jail, so enroot run by pyxis from slurmstepd
 *              (outside) and from the tasks (inside) sees the same containers on each node.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(slurmforge_jail, 1);

#define TAG "slurmforge_jail"

static char root_dir[PATH_MAX] = "/jail";
static char conf_dir[PATH_MAX] = "";
static char spool_dir[PATH_MAX] = "/var/spool/slurmd";
static char local_dir[PATH_MAX] = "";

static int set_option(const char *arg, const char *name, char *dst)
{
	size_t n = strlen(name);

	if (strncmp(arg, name, n) != 0 || arg[n] != '=')
		return 0;
	if (snprintf(dst, PATH_MAX, "%s", arg + n + 1) >= PATH_MAX || dst[0] != '/') {
		slurm_error(TAG ": %s must be an absolute path: %s", name, arg);
		return -1;
	}
	return 1;
}

static int parse_options(int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		int rc = set_option(av[i], "root", root_dir);

		if (!rc)
			rc = set_option(av[i], "conf", conf_dir);
		if (!rc)
			rc = set_option(av[i], "spool", spool_dir);
		if (!rc)
			rc = set_option(av[i], "local", local_dir);
		if (rc < 0)
			return -1;
		if (!rc) {
			slurm_error(TAG ": unknown option '%s' (expected root=, conf=, spool=, local=)",
				    av[i]);
			return -1;
		}
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	if (!spank_remote(sp))
		return ESPANK_SUCCESS;
	return parse_options(ac, av) ? ESPANK_ERROR : ESPANK_SUCCESS;
}

/* "<root><rel>" into out; rel starts with '/'. */
static const char *in_jail(const char *rel, char *out)
{
	if (snprintf(out, PATH_MAX, "%s%s", root_dir, rel) >= PATH_MAX)
		return NULL;
	return out;
}

static int do_mount(const char *src, const char *rel, const char *type, unsigned long flags,
		    const char *data)
{
	char dst[PATH_MAX];

	if (!in_jail(rel, dst) || mount(src, dst, type, flags, data) < 0) {
		slurm_error(TAG ": mount %s on %s%s: %m", src ? src : "(remount)", root_dir, rel);
		return -1;
	}
	return 0;
}

/* A read-only bind: the second mount call applies the flags to the bind itself. */
static int bind_ro(const char *src, const char *rel, unsigned long extra)
{
	if (do_mount(src, rel, NULL, MS_BIND | MS_REC, NULL))
		return -1;
	return do_mount(NULL, rel, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | extra, NULL);
}

/* Files the container runtime manages (/etc/hosts & co.); skipped where the jail lacks them. */
static int bind_node_file(const char *path)
{
	char dst[PATH_MAX];
	struct stat st;

	if (!in_jail(path, dst) || stat(dst, &st) < 0 || stat(path, &st) < 0)
		return 0;
	return bind_ro(path, path, 0);
}

/* local=: the job user's own directory in it (0700, theirs; made here, as root, by the first task
 * of the job on this node), and the whole directory bound read-write at the same path, when the
 * jail has the mount point for it. */
static int bind_local(spank_t sp)
{
	char dir[PATH_MAX], dst[PATH_MAX];
	uid_t uid;
	struct stat st;

	if (!local_dir[0])
		return 0;
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
		slurm_error(TAG ": the job's user is unknown");
		return -1;
	}
	if (snprintf(dir, sizeof(dir), "%s/%u", local_dir, (unsigned) uid) >= (int) sizeof(dir))
		return -1;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		slurm_error(TAG ": mkdir %s: %m", dir);
		return -1;
	}
	/* whatever was there, it is the user's own and no one else's */
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || chown(dir, uid, (gid_t) -1) < 0 ||
	    chmod(dir, 0700) < 0) {
		slurm_error(TAG ": preparing %s for uid %u: %m", dir, (unsigned) uid);
		return -1;
	}
	if (!in_jail(local_dir, dst) || stat(dst, &st) < 0 || !S_ISDIR(st.st_mode)) {
		slurm_info(TAG ": the jail has no %s: containers get no node-local scratch",
			   local_dir);
		return 0;
	}
	if (do_mount(local_dir, local_dir, NULL, MS_BIND, NULL))
		return -1;
	return do_mount(NULL, local_dir, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL);
}

/* The batch script lives in <spool>/job<id>/ outside: expose that one directory, nothing else. */
static int expose_script_dir(spank_t sp)
{
	char **argv = NULL, dir[PATH_MAX], dst[PATH_MAX];
	int argc = 0;
	size_t n = strlen(spool_dir);
	char *slash;

	if (do_mount("tmpfs", spool_dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755"))
		return -1;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1)
		return 0;
	if (strncmp(argv[0], spool_dir, n) != 0 || argv[0][n] != '/')
		return 0;
	snprintf(dir, sizeof(dir), "%s", argv[0]);
	slash = strrchr(dir, '/');
	*slash = '\0';
	if (!in_jail(dir, dst) || (mkdir(dst, 0700) < 0 && errno != EEXIST)) {
		slurm_error(TAG ": mkdir %s: %m", dst);
		return -1;
	}
	if (do_mount(dir, dir, NULL, MS_BIND, NULL))
		return -1;
	/* the script is executed from here, so exec stays allowed */
	return do_mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL);
}

static int enter(const char *cwd)
{
	char target[PATH_MAX];
	size_t n = strlen(root_dir);

	if (chdir(root_dir) < 0) {
		slurm_error(TAG ": chdir %s: %m", root_dir);
		return -1;
	}
	if (syscall(SYS_pivot_root, ".", ".") == 0) {
		/* the old root is stacked on "/": detach it so none of the node stays reachable */
		if (umount2(".", MNT_DETACH) < 0) {
			slurm_error(TAG ": detaching the node's root: %m");
			return -1;
		}
	} else if (mount(".", "/", NULL, MS_MOVE, NULL) == 0) {
		/*
		 * pivot_root is refused where the container runtime's seccomp profile leaves it out
		 * (Docker's default). Move the jail over the node's root instead, as switch_root does:
		 * the node's root is covered, and since the jail is now the top of the namespace's
		 * root, the kernel does not count the task as chrooted, so it may still create user
		 * namespaces (enroot, and pyxis through it, need them).
		 */
		if (chroot(".") < 0) {
			slurm_error(TAG ": chroot into the moved %s: %m", root_dir);
			return -1;
		}
	} else if (chroot(".") < 0) {
		slurm_error(TAG ": pivot_root, move and chroot into %s failed: %m", root_dir);
		return -1;
	} else {
		slurm_info(TAG ": %s entered with chroot: no user namespaces (containers) in this job",
			   root_dir);
	}
	/* The step's working directory, seen from inside (the node reaches /home through the jail). */
	if (strncmp(cwd, root_dir, n) == 0 && (cwd[n] == '/' || cwd[n] == '\0'))
		cwd += n;
	snprintf(target, sizeof(target), "%s", *cwd ? cwd : "/");
	if (chdir(target) < 0) {
		slurm_info(TAG ": working directory %s does not exist in the jail; using /", target);
		if (chdir("/") < 0)
			return -1;
	}
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	char cwd[PATH_MAX];
	const unsigned long hardened = MS_NOSUID | MS_NODEV | MS_NOEXEC;

	(void) ac;
	(void) av;
	if (!spank_remote(sp))
		return ESPANK_SUCCESS;
	if (!getcwd(cwd, sizeof(cwd)))
		snprintf(cwd, sizeof(cwd), "/");
	if (unshare(CLONE_NEWNS) < 0) {
		slurm_error(TAG ": unshare(CLONE_NEWNS): %m");
		return ESPANK_ERROR;
	}
	/* Nothing mounted below may propagate back to the node. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
		slurm_error(TAG ": making / a slave mount: %m");
		return ESPANK_ERROR;
	}
	if (mount(root_dir, root_dir, NULL, MS_BIND | MS_REC, NULL) < 0) {
		slurm_error(TAG ": binding %s onto itself: %m", root_dir);
		return ESPANK_ERROR;
	}
	/* hidepid=invisible needs Linux 5.8; older kernels accept the numeric form. */
	if (mount("proc", in_jail("/proc", (char[PATH_MAX]){0}), "proc", hardened,
		  "hidepid=invisible") < 0 &&
	    do_mount("proc", "/proc", "proc", hardened, "hidepid=2"))
		return ESPANK_ERROR;
	if (do_mount("/dev", "/dev", NULL, MS_BIND | MS_REC, NULL) ||
	    bind_ro("/sys", "/sys", hardened) ||
	    do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") ||
	    do_mount("/run/munge", "/run/munge", NULL, MS_BIND, NULL) ||
	    (conf_dir[0] && bind_ro(conf_dir, "/etc/slurm", hardened)) ||
	    bind_node_file("/etc/hosts") || bind_node_file("/etc/hostname") ||
	    bind_node_file("/etc/resolv.conf") || bind_local(sp) || expose_script_dir(sp) ||
	    enter(cwd))
		return ESPANK_ERROR;
	return ESPANK_SUCCESS;
}
