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
 * Each step also gets a PID namespace of its own (made in slurm_spank_init, held by an init of the
 * plugin's), into which slurmstepd forks the tasks: a task's /proc shows its step alone, so a task
 * can name no process outside it, nor follow such a process's /proc/<pid>/root out of the jail.
 * slurmstepd's own /proc hides other users' processes, for what it opens as the job's user and
 * what pyxis starts.
 * Before the job's program runs, the task checks that its stdin, stdout and stderr, which
 * slurmstepd opened in its own view of the node, are the files their paths name in the jail.
 *
 * A user's task epilog (srun --task-epilog), which slurmstepd starts itself rather than as a task,
 * gets slurm_spank_task_init_privileged too, with no task: Slurm is built with that one call added
 * (images/slurm-debs/epilog-in-jail), so the script runs in the jail like her tasks. When the job
 * ends on the node (slurm_spank_job_epilog) whatever of its user still runs in its cgroups, such
 * as a process that script detached, is killed.
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
 * own and the node's /dev/shm, as before jobs had their own; with SLURMFORGE_JAIL=shared-pid steps
 * run as before they had a PID namespace of their own (nor their stdio checked). All three are
 * for measuring what the jail, the per-job directories and the step's PID namespace cost
 * (bench/b7_jobs.py); a job cannot change a daemon's environment.
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
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(slurmforge_jail, 1);

#define TAG "slurmforge_jail"
#ifndef SLURM_BATCH_SCRIPT
#define SLURM_BATCH_SCRIPT (0xfffffffb) /* slurm.h's step ID of a batch script, 23.11 to 26.05 */
#endif
#ifndef SLURM_EXTERN_CONT
#define SLURM_EXTERN_CONT (0xfffffffc) /* and of the extern step (PrologFlags=Contain) */
#endif
/*
 * What a hook returns when it fails. Not ESPANK_ERROR: slurmstepd and the client commands only
 * treat a negative return of the plugin stack as a failure, and ESPANK_ERROR is positive, so a
 * task whose jail could not be entered would run on the node itself.
 */
#define FAILED (-1)
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424 /* the same number on every arch */
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

static char root_dir[PATH_MAX] = "/jail";
static char conf_dir[PATH_MAX] = "";
static char spool_dir[PATH_MAX] = "/var/spool/slurmd";
static char local_dir[PATH_MAX] = "";
static char jobs_dir[PATH_MAX] = "/var/lib/slurmforge/jobs";
static const char shm_dir[] = "/dev/shm/.slurmforge";
/* the step's PID namespace (make_step_pid_namespace), once slurmstepd has made it, its init, how
 * many of the step's tasks on this node have not ended yet, and slurmstepd's own namespace */
static int step_pid_ns = -1, node_pid_ns = -1;
static pid_t step_init_pid = -1, step_holder_pid = -1;
static uint32_t tasks_running;

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

/* A /proc that hides other users' processes (of the PID namespace of the process that mounts it:
 * the task's, the step's own); hidepid=invisible needs Linux 5.8, older kernels take the numeric
 * form. */
static int mount_proc(const char *dst)
{
	const unsigned long hardened = MS_NOSUID | MS_NODEV | MS_NOEXEC;

	if (mount("proc", dst, "proc", hardened, "hidepid=invisible") == 0 ||
	    mount("proc", dst, "proc", hardened, "hidepid=2") == 0)
		return 0;
	slurm_error(TAG ": mount proc on %s: %m", dst);
	return -1;
}

/*
 * A user's task epilog (no task: see images/slurm-debs/epilog-in-jail) is forked by slurmstepd
 * in the node's PID namespace, where the /proc it mounts would show every process of the user
 * on the node, pyxis's enroot helpers among them, which run on the node's root: through their
 * /proc/<pid>/root the script could reach it. Like the tasks, it runs in the step's namespace:
 * this process forks the rest of the epilog there and passes its exit status on. It leads a
 * process group of its own first, which is the group slurmstepd kills when the script overruns
 * its time; the script itself, in the step's namespace, ends with it at the latest.
 */
static int epilog_into_step(void)
{
	pid_t child;
	int status;

	if (step_pid_ns < 0)
		return 0; /* no namespace of the step's (shared-pid): the node's, as its tasks */
	if (setpgid(0, 0) < 0 || setns(step_pid_ns, CLONE_NEWPID) < 0) {
		slurm_error(TAG ": moving the task epilog into the step's PID namespace: %m");
		return -1;
	}
	child = fork();
	if (child < 0) {
		slurm_error(TAG ": fork for the task epilog: %m");
		return -1;
	}
	if (child == 0)
		return 0;
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			_exit(127);
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	char cwd[PATH_MAX], proc[PATH_MAX];
	const unsigned long hardened = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	int task;

	(void) ac;
	(void) av;
	if (!spank_remote(sp) || mode_is("off"))
		return ESPANK_SUCCESS;
	if (spank_get_item(sp, S_TASK_ID, &task) == ESPANK_NOT_TASK && epilog_into_step())
		return FAILED;
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
	if (!in_jail("/proc", proc)) {
		slurm_error(TAG ": %s/proc: path too long", root_dir);
		return FAILED;
	}
	if (mount_proc(proc))
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

/*
 * The task's stdin, stdout and stderr were opened by slurmstepd, as the job's user but in its own
 * view of the node (a batch job's --input, --output and --error; srun's -o and -e): each must be
 * the very file its path names inside the jail, or the job could read or write a file of the
 * node's (`sbatch --input=/proc/1/cmdline`, `--input=/jail/...`, a path through another process's
 * /proc/<pid>/root). The node reaches the jail's homes through <root>/home, so a path under the
 * jail's mount point names the file below it. Pipes and sockets to srun have no path. Checked by
 * the process that is to run the job's program, inside the jail and before it runs, so nothing of
 * such a file reaches the job; the job fails, saying why on its error file where that one is its
 * own.
 *
 * Whether descriptor fd is a file (path: as slurmstepd named it) other than the one its path
 * names in here. */
static int outside(int fd, char *path)
{
	char link[32];
	const char *inside = path;
	size_t n = strlen(root_dir);
	struct stat opened, named;
	ssize_t len;

	if (fstat(fd, &opened) < 0)
		return 0; /* not open */
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, PATH_MAX - 1);
	if (len <= 0) {
		snprintf(path, PATH_MAX, "(descriptor %d, unnamed: %m)", fd);
		return 1; /* what cannot be checked is refused */
	}
	path[len] = '\0';
	if (path[0] != '/')
		return 0; /* a pipe or a socket */
	if (!strncmp(path, root_dir, n) && path[n] == '/')
		inside = path + n;
	return stat(inside, &named) < 0 || named.st_dev != opened.st_dev ||
	       named.st_ino != opened.st_ino;
}

static int stdio_in_jail(void)
{
	static const char *const what[] = {"input", "output", "error"};
	char path[PATH_MAX], err[PATH_MAX];

	for (int fd = 0; fd <= 2; fd++) {
		if (!outside(fd, path))
			continue;
		slurm_error(TAG ": the job's %s file %s is outside the jail", what[fd], path);
		if (fd != 2 && !outside(2, err))
			dprintf(2, TAG ": refused: the job's %s file %s is not a file in the jail\n",
				what[fd], path);
		return -1;
	}
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!spank_remote(sp) || mode_is("off") || mode_is("task-tmp") || mode_is("shared-pid"))
		return ESPANK_SUCCESS;
	return stdio_in_jail() ? FAILED : ESPANK_SUCCESS;
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
 * The node's one world-writable directory that the step's view does not lead into the job's or
 * the jail's (/tmp, /dev/shm and /var/tmp do): an empty tmpfs only root may write. Whatever
 * slurmstepd opens or starts as the user (an --output path, pyxis's enroot helpers, whose
 * /proc/<pid>/root her ssh session on the node can name) leaves no file of hers on the node.
 */
static int cover_run_lock(void)
{
	struct stat st;

	if (lstat("/run/lock", &st) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	if (mount("tmpfs", "/run/lock", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "mode=0755,size=64k") < 0) {
		slurm_error(TAG ": covering /run/lock in slurmstepd: %m");
		return -1;
	}
	return 0;
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
	if (bind_over(tmp, "/tmp") || bind_over(shm, "/dev/shm") || cover_run_lock())
		return -1;
	/*
	 * A /proc of this step's own that hides other users' processes: slurmstepd is root and sees
	 * every one, but what it opens as the job's user (the stdio files) and what pyxis starts
	 * through enroot, which binds this /proc into the container, see only the user's own.
	 */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") <
		    0 &&
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") < 0) {
		slurm_error(TAG ": mounting slurmstepd's /proc: %m");
		return -1;
	}
	return bind_jail_dirs();
}

/*
 * The step's PID namespace, held open by its init. slurmstepd forks the step's tasks into it
 * (slurm_spank_user_init to slurm_spank_task_post_fork), so every process of the tasks runs in
 * it and a task's /proc, which the task mounts, shows the step alone: nothing outside it (an ssh
 * session on the node, another step, the node's daemons, whatever root they have) can be named
 * through /proc/<pid>. Slurm sees the tasks as ever: their PIDs, signals, exit statuses, cgroups.
 */

/* Every descriptor from fd up closed. */
static void close_from(int fd)
{
#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned) fd, ~0U, 0) == 0)
		return;
#endif
	for (int i = fd; i < 65536; i++)
		close(i);
}

/* PID 1 of the step's namespace: reaps what is orphaned in it, and ends with slurmstepd (the
 * kernel then kills whatever of the step is left in it). */
static void __attribute__((noreturn)) step_init(void)
{
	sigset_t all;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	prctl(PR_SET_NAME, "slurmforge-init");
	close_from(0);
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	for (;;) {
		siginfo_t info;

		if (sigwaitinfo(&all, &info) == SIGCHLD)
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
	}
}

/*
 * A helper forked from slurmstepd unshares a PID namespace and forks its init, whose PID (in the
 * node's namespace) it hands back, then waits for it: slurmstepd's own children stay in the
 * node's namespace until the tasks are forked (a thread whose children would go to another
 * namespace cannot start threads, and slurmstepd starts several). Not clone(CLONE_NEWPID) from
 * slurmstepd itself: qemu-user, which runs a node of another arch, takes no such flag.
 */
static void __attribute__((noreturn)) step_holder(int ready)
{
	sigset_t all;
	pid_t init;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (unshare(CLONE_NEWPID) < 0 || (init = fork()) < 0)
		_exit(1);
	if (init == 0)
		step_init();
	if (write(ready, &init, sizeof(init)) != (ssize_t) sizeof(init))
		_exit(1);
	close_from(0);
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	while (waitpid(init, NULL, 0) < 0 && errno == EINTR)
		;
	_exit(0);
}

static int make_step_pid_namespace(spank_t sp)
{
	char path[64];
	uint32_t step;
	int ready[2];
	pid_t init = -1;

	/* the extern step runs no task (sessions pam_slurm_adopt puts in its cgroup are not its) */
	if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS || step == SLURM_EXTERN_CONT ||
	    spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &tasks_running) != ESPANK_SUCCESS)
		return 0;
	node_pid_ns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
	if (node_pid_ns < 0 || pipe2(ready, O_CLOEXEC) < 0) {
		slurm_error(TAG ": preparing the step's PID namespace: %m");
		return -1;
	}
	step_holder_pid = fork();
	if (step_holder_pid == 0) {
		close(ready[0]);
		step_holder(ready[1]);
	}
	close(ready[1]);
	if (step_holder_pid < 0 || read(ready[0], &init, sizeof(init)) != (ssize_t) sizeof(init)) {
		slurm_error(TAG ": starting the step's PID namespace failed");
		close(ready[0]);
		return -1;
	}
	close(ready[0]);
	step_init_pid = init;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int) init);
	step_pid_ns = open(path, O_RDONLY | O_CLOEXEC);
	if (step_pid_ns < 0) {
		slurm_error(TAG ": opening %s: %m", path);
		return -1;
	}
	return 0;
}

/* The namespace slurmstepd's main thread forks its children into: root's to choose, and
 * slurmstepd runs as the job's user here, with root as its saved ID. */
static int fork_into(int ns)
{
	uid_t euid = geteuid();
	int rc;

	if (euid != 0 && seteuid(0) < 0) {
		slurm_error(TAG ": taking back root to enter a PID namespace: %m");
		return -1;
	}
	rc = setns(ns, CLONE_NEWPID);
	if (rc < 0)
		slurm_error(TAG ": setns(CLONE_NEWPID): %m");
	if (euid != 0 && seteuid(euid) < 0) {
		slurm_error(TAG ": giving up root again: %m");
		return -1;
	}
	return rc;
}

/* Right before slurmstepd forks the tasks: its next children go into the step's namespace, the
 * container pyxis (listed after this plugin) starts for the step among them. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!spank_remote(sp) || step_pid_ns < 0)
		return ESPANK_SUCCESS;
	return fork_into(step_pid_ns) ? FAILED : ESPANK_SUCCESS;
}

/* The tasks are forked (this runs for each, in slurmstepd, once all are): its children go into
 * the node's namespace again, and it may start threads. */
int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!spank_remote(sp) || node_pid_ns < 0)
		return ESPANK_SUCCESS;
	if (fork_into(node_pid_ns))
		return FAILED;
	close(node_pid_ns);
	node_pid_ns = -1;
	return ESPANK_SUCCESS;
}

/* The step's last task on this node has ended: its namespace goes, and whatever it left running
 * in it with it (Slurm kills that next anyway). Ended, and its holder reaped, here, before
 * slurmstepd removes the step's cgroups, which must be empty by then. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!spank_remote(sp) || step_init_pid <= 0 || --tasks_running > 0)
		return ESPANK_SUCCESS;
	kill(step_init_pid, SIGKILL);
	while (waitpid(step_holder_pid, NULL, 0) < 0 && errno == EINTR)
		;
	step_init_pid = step_holder_pid = -1;
	return ESPANK_SUCCESS;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	if (!spank_remote(sp) || mode_is("off"))
		return ESPANK_SUCCESS;
	if (parse_options(ac, av) ||
	    (!mode_is("task-tmp") && (enter_job_namespace(sp) ||
				      (!mode_is("shared-pid") && make_step_pid_namespace(sp)))))
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

/* Whether a line of /proc/<pid>/cgroup puts the process in the cgroup named seg ("/job_<id>") or
 * below it, in any hierarchy. */
static int in_cgroup(const char *line, const char *seg)
{
	size_t n = strlen(seg);

	for (const char *p = line; (p = strstr(p, seg)); p += n)
		if (p[n] == '/' || p[n] == '\n' || p[n] == '\0')
			return 1;
	return 0;
}

/* The process pidfd refers to (opened before its /proc entry was read, so that a PID reused
 * meanwhile is never the one signalled), or pid where pidfds are missing, killed. */
static int kill_process(int pidfd, long pid)
{
	if (pidfd < 0)
		return kill((pid_t) pid, SIGKILL);
	return (int) syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
}

/*
 * Whether process pid runs (not a zombie waiting to be reaped) with uid as its real user ID, from
 * its status file: the owner of /proc/<pid> is root for a process that made itself non-dumpable,
 * and a program it started setuid keeps her as its real user.
 */
static int runs_as(long pid, uid_t uid)
{
	char path[64], line[256];
	unsigned long real;
	int state = 0, owner = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if (!(f = fopen(path, "re")))
		return 0; /* gone */
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "State:", 6))
			state = line[strspn(line + 6, " \t") + 6];
		else if (sscanf(line, "Uid: %lu", &real) == 1)
			owner = real == (unsigned long) uid;
	}
	fclose(f);
	return owner && state != 'Z' && state != 'X';
}

/* One pass over /proc: each process of uid in job's cgroups is killed; how many were. */
static int kill_pass(uint32_t job, uid_t uid)
{
	char seg[32], path[64], line[PATH_MAX];
	DIR *proc = opendir("/proc");
	struct dirent *e;
	int killed = 0;

	if (!proc)
		return 0;
	snprintf(seg, sizeof(seg), "/job_%u", (unsigned) job);
	while ((e = readdir(proc))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		FILE *f;
		int hit = 0, pidfd;

		if (*end || pid <= 1)
			continue;
		pidfd = (int) syscall(SYS_pidfd_open, (pid_t) pid, 0);
		if (pidfd < 0 && errno != ENOSYS)
			continue; /* gone already */
		if (runs_as(pid, uid)) {
			snprintf(path, sizeof(path), "/proc/%ld/cgroup", pid);
			if ((f = fopen(path, "re"))) {
				while (!hit && fgets(line, sizeof(line), f))
					hit = in_cgroup(line, seg);
				fclose(f);
			}
		}
		if (hit && kill_process(pidfd, pid) == 0) {
			slurm_info(TAG ": job %u ended, its process %ld was still running: killed",
				   (unsigned) job, pid);
			killed++;
		}
		if (pidfd >= 0)
			close(pidfd);
	}
	closedir(proc);
	return killed;
}

/*
 * Whatever of the job's user still runs in the job's cgroups on this node once the job has ended
 * is killed. Slurm ends each step's tasks, but a process that a user's task epilog detached with
 * setsid belongs to no step's tasks and outlived the job. Root's processes are left alone; passes
 * are repeated while they find something (a process may fork meanwhile).
 */
static void kill_leftovers(spank_t sp)
{
	uint32_t job;
	uid_t uid;

	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || uid == 0)
		return;
	for (int pass = 0; pass < 10 && kill_pass(job, uid); pass++)
		;
}

/* The job has ended on this node: what it left running is killed, and its /tmp and /dev/shm go
 * with it. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	char tmp[PATH_MAX], shm[PATH_MAX];

	kill_leftovers(sp);
	if (mode_is("off") || mode_is("task-tmp"))
		return ESPANK_SUCCESS;
	if (parse_options(ac, av) || job_dirs(sp, tmp, shm))
		return FAILED;
	remove_tree(tmp);
	remove_tree(shm);
	return ESPANK_SUCCESS;
}
