/*
 * slurmforge_jail: run every task of a job step inside the shared-root jail, with a /tmp and a
 * /dev/shm of the job's own.
 *
 * In slurmstepd (slurm_spank_init, as root, before the MPI plugin and the output files are set up)
 * the step gets a private mount namespace in which the paths a job writes to mean what they mean
 * inside the jail:
 *   - /tmp and /dev/shm are the job's own directories on this node (made by its first step here,
 *     removed by the job epilog), shared by every step and task of the job and seen by no other;
 *   - the jail's own top-level directories that the node does not need for itself (/root, /opt,
 *     /srv, /mnt, a scratch area...) and the jail's /var/tmp are bound over the node's.
 * So the batch script's output file, an `srun -o` file and the PMIx client directory that the MPI
 * plugin makes under /tmp all land where the job sees them. (/home on the nodes already leads
 * into the jail.)
 *
 * In each task (slurm_spank_task_init_privileged, still root) the task gets another mount
 * namespace of its own, the jail's runtime mounts are assembled (a fresh /proc that hides other
 * users' processes, the node's /dev with the job's /dev/shm, a read-only /sys, the job's /tmp, the
 * munge socket, the client Slurm configuration, the step's spool directories) and the task pivots
 * into the jail. slurmd and slurmstepd never enter it.
 *
 * In sbatch (inside the jail) a job submitted from a directory whose files the node keeps for
 * itself (/etc, /usr, /var...) is refused, since its output file could not be written there.
 *
 * plugstack.conf:
 *   required /usr/lib/slurmforge/spank/jail.so root=/jail conf=/etc/slurmforge/jail/slurm
 * options:
 *   root=DIR   the jail's mount point on the node (default /jail)
 *   conf=DIR   directory bound read-only onto the jail's /etc/slurm (default: none)
 *   spool=DIR  the node's SlurmdSpoolDir (default /var/spool/slurmd)
 *   jobs=DIR   where the jobs' /tmp directories live on the node (default
 *              /var/lib/slurmforge/jobs); their /dev/shm directories live in /dev/shm/.slurmforge
 *   local=DIR  node-local scratch for container roots (default: none). Each task makes
 *              DIR/<uid> for the job's user (0700, theirs; DIR itself stays root's) and binds DIR
 *              at the same path inside the jail, so enroot run by pyxis from slurmstepd
 *              (outside) and from the tasks (inside) sees the same containers on each node.
 *
 * On a node whose slurmd runs with SLURMFORGE_JAIL=off in its environment the plugin does nothing
 * (steps run on the node's own root); with SLURMFORGE_JAIL=task-tmp each task gets a /tmp of its
 * own and the node's /dev/shm, as before jobs had their own. Both are for measuring what the jail
 * and the per-job directories cost (bench/b7_jobs.py); a job cannot change a daemon's environment.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
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
#ifndef SLURM_BATCH_SCRIPT
#define SLURM_BATCH_SCRIPT (0xfffffffb) /* slurm.h's step ID of a batch script, 23.11 to 26.05 */
#endif
/*
 * What a hook returns when it fails. Not ESPANK_ERROR: slurmstepd and the client commands only
 * treat a negative return of the plugin stack as a failure, and ESPANK_ERROR is positive, so a
 * task whose jail could not be entered would run on the node itself.
 */
#define FAILED (-1)

static char root_dir[PATH_MAX] = "/jail";
static char conf_dir[PATH_MAX] = "";
static char spool_dir[PATH_MAX] = "/var/spool/slurmd";
static char local_dir[PATH_MAX] = "";
static char jobs_dir[PATH_MAX] = "/var/lib/slurmforge/jobs";
static const char shm_dir[] = "/dev/shm/.slurmforge";

/* Top-level directories of the jail that stay the node's own in slurmstepd's view. */
static const char *const node_dirs[] = {
	"bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "lost+found",
	"proc", "run", "sbin", "sys", "tmp", "usr", "var", NULL,
};

/* SLURMFORGE_JAIL in this daemon's own environment (never the job's): "off", "task-tmp" or unset. */
static int mode_is(const char *mode)
{
	const char *set = getenv("SLURMFORGE_JAIL");

	return set && !strcmp(set, mode);
}

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
		if (!rc)
			rc = set_option(av[i], "jobs", jobs_dir);
		if (rc < 0)
			return -1;
		if (!rc) {
			slurm_error(TAG ": unknown option '%s' (expected root=, conf=, spool=, jobs=, local=)",
				    av[i]);
			return -1;
		}
	}
	return 0;
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

/* <spool>/<name> (a directory of this step's, when it has one) at the same path inside. */
static int expose_spool_dir(const char *name, mode_t mode)
{
	char dir[PATH_MAX], dst[PATH_MAX];
	struct stat st;

	if (snprintf(dir, sizeof(dir), "%s/%s", spool_dir, name) >= (int) sizeof(dir) ||
	    lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	if (!in_jail(dir, dst) || (mkdir(dst, mode) < 0 && errno != EEXIST)) {
		slurm_error(TAG ": mkdir %s: %m", dst);
		return -1;
	}
	if (do_mount(dir, dir, NULL, MS_BIND, NULL))
		return -1;
	return do_mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL);
}

/*
 * The spool directory outside holds every job's scripts and credentials: inside, it is an empty
 * tmpfs with only this step's directories in it. A batch step's script is <spool>/job<id>/
 * slurm_script (slurmstepd's batchdir, <id> zero-padded to five digits), executed from there; the
 * MPI plugin's PMIx server keeps its socket and the shared memory its clients map in
 * <spool>/pmix.<job>.<step>/. The names come from the job's ID alone: the task's argv[0] is the
 * user's to choose (`srun /var/spool/slurmd/job<other>/../x`), so it only says whether this step
 * runs its batch script.
 */
static int expose_spool(spank_t sp)
{
	char **argv = NULL, name[PATH_MAX], script[PATH_MAX];
	int argc = 0;
	uint32_t job, step;

	if (do_mount("tmpfs", spool_dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755"))
		return -1;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
		return 0;
	snprintf(name, sizeof(name), "job%05u", job);
	if (step == SLURM_BATCH_SCRIPT &&
	    spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc >= 1 &&
	    snprintf(script, sizeof(script), "%s/%s/slurm_script", spool_dir, name) <
		    (int) sizeof(script) &&
	    !strcmp(argv[0], script) && expose_spool_dir(name, 0700))
		return -1;
	snprintf(name, sizeof(name), "pmix.%u.%u", job, step);
	return expose_spool_dir(name, 0755);
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
	char cwd[PATH_MAX], proc[PATH_MAX];
	const unsigned long hardened = MS_NOSUID | MS_NODEV | MS_NOEXEC;

	(void) ac;
	(void) av;
	if (!spank_remote(sp) || mode_is("off"))
		return ESPANK_SUCCESS;
	if (!getcwd(cwd, sizeof(cwd)))
		snprintf(cwd, sizeof(cwd), "/");
	if (unshare(CLONE_NEWNS) < 0) {
		slurm_error(TAG ": unshare(CLONE_NEWNS): %m");
		return FAILED;
	}
	/* Nothing mounted below may propagate back to the node. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
		slurm_error(TAG ": making / a slave mount: %m");
		return FAILED;
	}
	if (mount(root_dir, root_dir, NULL, MS_BIND | MS_REC, NULL) < 0) {
		slurm_error(TAG ": binding %s onto itself: %m", root_dir);
		return FAILED;
	}
	/* hidepid=invisible needs Linux 5.8; older kernels accept the numeric form. */
	if (!in_jail("/proc", proc)) {
		slurm_error(TAG ": %s/proc: path too long", root_dir);
		return FAILED;
	}
	if (mount("proc", proc, "proc", hardened, "hidepid=invisible") < 0 &&
	    do_mount("proc", "/proc", "proc", hardened, "hidepid=2"))
		return FAILED;
	/* /dev brings the job's /dev/shm, and "/tmp" is the job's here too (slurm_spank_init) */
	if (do_mount("/dev", "/dev", NULL, MS_BIND | MS_REC, NULL) ||
	    bind_ro("/sys", "/sys", hardened) ||
	    (mode_is("task-tmp")
		     ? do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
		     : (do_mount("/tmp", "/tmp", NULL, MS_BIND, NULL) ||
			do_mount(NULL, "/tmp", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV,
				 NULL))) ||
	    do_mount("/run/munge", "/run/munge", NULL, MS_BIND, NULL) ||
	    (conf_dir[0] && bind_ro(conf_dir, "/etc/slurm", hardened)) ||
	    bind_node_file("/etc/hosts") || bind_node_file("/etc/hostname") ||
	    bind_node_file("/etc/resolv.conf") || bind_local(sp) || expose_spool(sp) ||
	    enter(cwd))
		return FAILED;
	return ESPANK_SUCCESS;
}

/* A directory of root's with exactly this mode, made if missing; anything else in its place is an
 * error (nothing but root can write where these live). */
static int root_dir_with_mode(const char *path, mode_t mode)
{
	struct stat st;

	if (mkdir(path, mode) < 0 && errno != EEXIST) {
		slurm_error(TAG ": mkdir %s: %m", path);
		return -1;
	}
	if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0) {
		slurm_error(TAG ": %s is not a directory of root's", path);
		return -1;
	}
	if ((st.st_mode & 07777) != mode && chmod(path, mode) < 0) {
		slurm_error(TAG ": chmod %s: %m", path);
		return -1;
	}
	return 0;
}

/* The job's /tmp and /dev/shm directories on this node. */
static int job_dirs(spank_t sp, char *tmp, char *shm)
{
	uint32_t job;

	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) {
		slurm_error(TAG ": the job's ID is unknown");
		return -1;
	}
	if (snprintf(tmp, PATH_MAX, "%s/%u", jobs_dir, job) >= PATH_MAX ||
	    snprintf(shm, PATH_MAX, "%s/%u", shm_dir, job) >= PATH_MAX)
		return -1;
	return 0;
}

/* src over dst in slurmstepd's namespace, nosuid and nodev. */
static int bind_over(const char *src, const char *dst)
{
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0 ||
	    mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0) {
		slurm_error(TAG ": binding %s over %s: %m", src, dst);
		return -1;
	}
	return 0;
}

static int is_node_dir(const char *name)
{
	size_t n = strcspn(root_dir + 1, "/");

	for (const char *const *d = node_dirs; *d; d++)
		if (!strcmp(*d, name))
			return 1;
	/* the jail's own mount point, should the jail hold a directory of that name */
	return strlen(name) == n && !strncmp(root_dir + 1, name, n);
}

/* The jail's top-level directories that the node does not need (and its /var/tmp) over the
 * node's, so that a path a job writes to names the same file inside the jail and in slurmstepd. */
static int bind_jail_dirs(void)
{
	DIR *dir = opendir(root_dir);
	struct dirent *e;
	int rc = 0;

	if (!dir) {
		slurm_error(TAG ": opendir %s: %m", root_dir);
		return -1;
	}
	while (!rc && (e = readdir(dir))) {
		char src[PATH_MAX], dst[PATH_MAX];
		struct stat st;

		if (e->d_name[0] == '.' || is_node_dir(e->d_name) ||
		    snprintf(src, sizeof(src), "%s/%s", root_dir, e->d_name) >= (int) sizeof(src) ||
		    lstat(src, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		snprintf(dst, sizeof(dst), "/%s", e->d_name);
		if (mkdir(dst, 0755) < 0 && errno != EEXIST) {
			slurm_error(TAG ": mkdir %s: %m", dst);
			rc = -1;
		} else if (lstat(dst, &st) < 0 || !S_ISDIR(st.st_mode)) {
			slurm_info(TAG ": %s is not a directory on this node: left as it is", dst);
		} else {
			rc = bind_over(src, dst);
		}
	}
	closedir(dir);
	if (!rc) {
		char src[PATH_MAX];
		struct stat st;

		if (in_jail("/var/tmp", src) && lstat(src, &st) == 0 && S_ISDIR(st.st_mode) &&
		    lstat("/var/tmp", &st) == 0 && S_ISDIR(st.st_mode))
			rc = bind_over(src, "/var/tmp");
	}
	return rc;
}

/*
 * slurmstepd's own view (see the top of this file). Runs in the step's main thread before the MPI
 * plugin and the I/O set-up; threads and processes started after it inherit the namespace.
 */
static int enter_job_namespace(spank_t sp)
{
	char tmp[PATH_MAX], shm[PATH_MAX];

	if (job_dirs(sp, tmp, shm) || root_dir_with_mode(jobs_dir, 0700) ||
	    root_dir_with_mode(tmp, 01777) || root_dir_with_mode(shm_dir, 0700) ||
	    root_dir_with_mode(shm, 01777))
		return -1;
	if (unshare(CLONE_NEWNS) < 0) {
		slurm_error(TAG ": unshare(CLONE_NEWNS) in slurmstepd: %m");
		return -1;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
		slurm_error(TAG ": making / a slave mount in slurmstepd: %m");
		return -1;
	}
	if (bind_over(tmp, "/tmp") || bind_over(shm, "/dev/shm"))
		return -1;
	return bind_jail_dirs();
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	if (!spank_remote(sp) || mode_is("off"))
		return ESPANK_SUCCESS;
	if (parse_options(ac, av) || (!mode_is("task-tmp") && enter_job_namespace(sp)))
		return FAILED;
	return ESPANK_SUCCESS;
}

/* Where a file that slurmstepd opens would land on the node rather than in the jail. */
static int stays_on_node(const char *path)
{
	char first[NAME_MAX + 1];
	size_t n = strcspn(path + 1, "/");

	if (!strcmp(path, "/"))
		return 1;
	if (!strncmp(path, "/var/tmp", 8) && (path[8] == '/' || path[8] == '\0'))
		return 0;
	if (!strncmp(path, "/dev/shm", 8) && (path[8] == '/' || path[8] == '\0'))
		return 0;
	if (n > NAME_MAX)
		return 0;
	memcpy(first, path + 1, n);
	first[n] = '\0';
	return strcmp(first, "home") && strcmp(first, "tmp") && is_node_dir(first);
}

/* sbatch (inside the jail): the batch script's output goes to the submit directory by default,
 * and slurmstepd could only write it there on the node itself, where the user never sees it. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	char cwd[PATH_MAX];

	(void) sp;
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_ALLOCATOR || strcmp(program_invocation_short_name, "sbatch") ||
	    !getcwd(cwd, sizeof(cwd)) || !stays_on_node(cwd))
		return ESPANK_SUCCESS;
	slurm_error(TAG ": cannot submit from %s: the job's output file would be written on the "
		    "compute node, outside the jail; submit from your home, /root, /opt, /tmp, "
		    "/var/tmp or a scratch directory", cwd);
	return FAILED;
}

/*
 * Everything in the directory open at dir, depth first, then dir itself closed. Each entry is
 * named relative to its parent's descriptor and opened with O_NOFOLLOW, so a directory swapped
 * for a link meanwhile (by a process of the job's user that outlived it) is removed as the link
 * it is, never followed: root deletes nothing outside the tree, nor on another file system
 * mounted in it.
 */
static void remove_contents(int dir, const char *path, int depth)
{
	DIR *d = fdopendir(dir);
	struct dirent *e;
	struct stat top, st;

	if (!d || fstat(dir, &top) < 0) {
		if (d)
			closedir(d);
		else
			close(dir);
		return;
	}
	while ((e = readdir(d))) {
		int sub;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0 || errno == ENOENT)
			continue;
		sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0 && depth < 256 && fstat(sub, &st) == 0 && st.st_dev == top.st_dev)
			remove_contents(sub, path, depth + 1);
		else if (sub >= 0)
			close(sub);
		if (unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
			slurm_error(TAG ": removing %s/.../%s: %m", path, e->d_name);
	}
	closedir(d);
}

static void remove_tree(const char *path)
{
	int dir = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (dir < 0) {
		if (errno != ENOENT && unlink(path) < 0 && errno != ENOENT)
			slurm_error(TAG ": removing %s: %m", path);
		return;
	}
	remove_contents(dir, path, 0);
	if (rmdir(path) < 0 && errno != ENOENT)
		slurm_error(TAG ": removing %s: %m", path);
}

/* The job has ended on this node: its /tmp and /dev/shm go with it. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	char tmp[PATH_MAX], shm[PATH_MAX];

	if (mode_is("off") || mode_is("task-tmp"))
		return ESPANK_SUCCESS;
	if (parse_options(ac, av) || job_dirs(sp, tmp, shm))
		return FAILED;
	remove_tree(tmp);
	remove_tree(shm);
	return ESPANK_SUCCESS;
}
