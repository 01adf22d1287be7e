"""B17: `invoke backup` of a running cluster with 10,240 job records and a 1 GB home, against the
same copies made by hand in the same run (`mariadb-dump --single-transaction` and `tar` of the
StateSave and of the jail's user state, each written to a file); what slurmctld's clients see
while the backup runs (RPCs refused, the longest answer) against a stretch without one; and
`invoke restore` of the archive after `invoke down --volumes`, to every node idle.

The job records: ten real jobs, then their rows copied in the database ten times over with new
job IDs (a site's accounting of 10,240 jobs without running them all here). The home: 1 GB of
random bytes (nothing compresses; neither side compresses).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from bench.b8_k8s import cluster_file
from bench.common import container_argv, container_sh, invoke
from slurmforge.deploy.backup.take import JAIL_STATE

JOBS = "slurm_acct_db"
DOUBLINGS = 10  # 10 jobs → 10,240 records
# the same jail paths the backup reads
JAIL = " ".join(JAIL_STATE)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        name = f"sfb17{os.getpid() % 10000}"
        path = cluster_file(root, name)
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        where = ["--cluster", str(path), "--out", str(root / "out")]

        sh = container_sh(name)

        def to_file(service: str, command: str, out: Path) -> None:
            argv = container_argv(name, service, command)
            with out.open("wb") as fh:
                subprocess.run(argv, stdout=fh, check=True)

        def watched(action) -> tuple[float, int, int, float]:
            """(seconds of ``action``, RPCs, RPCs refused, longest answer in ms) of squeue run
            back to back on the login node while ``action`` runs."""
            log = "/tmp/b17-rpc.log"
            loop = (
                f"rm -f {log}; echo $$ > {log}.pid; "
                "while :; do s=$(date +%s%N); squeue -h >/dev/null 2>&1; r=$?; "
                f'e=$(date +%s%N); echo "$r $(( (e - s) / 1000000 ))" >> {log}; done'
            )
            watcher = subprocess.Popen(
                ["docker", "exec", f"{name}_login_1", "bash", "-c", loop],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1)
            start = time.perf_counter()
            action()
            took = time.perf_counter() - start
            sh("login", f"kill $(cat {log}.pid)")
            watcher.kill()
            lines = [line.split() for line in sh("login", f"cat {log}").splitlines()]
            rpcs = [(int(r), int(ms)) for r, ms in (x for x in lines if len(x) == 2)]
            refused = sum(1 for r, _ in rpcs if r)
            return took, len(rpcs), refused, max((ms for _, ms in rpcs), default=0)

        try:
            invoke("deploy", *where)
            sh("login", "chroot /jail createuser --non-interactive ada >/dev/null")
            user = shlex.quote("cd && head -c 1G /dev/urandom > big.bin && "
                               "for i in $(seq 10); do sbatch -Q --wrap true; done")  # fmt: skip
            sh("login", f"chroot /jail su - ada -c {user}")
            while sh("slurmctld", "squeue -h | wc -l") != "0":
                time.sleep(1)
            time.sleep(3)
            table = f"{name}_job_table"
            quoted = "concat(char(96), column_name, char(96))"  # `name`: partition is a keyword
            cols = sh("mariadb", f"mariadb -N -e \"select group_concat({quoted}) from "
                      f"information_schema.columns where table_schema='{JOBS}' and "
                      f"table_name='{table}' and column_name != 'job_db_inx'\"")  # fmt: skip
            picked = ",".join("`id_job`+@m" if c == "`id_job`" else c for c in cols.split(","))
            for _ in range(DOUBLINGS):
                sql = (f"select max(id_job) into @m from {table}; insert into {table} ({cols}) "
                       f"select {picked} from {table};")  # fmt: skip
                sh("mariadb", f"mariadb {JOBS} -e {shlex.quote(sql)}")
            records = int(sh("slurmctld", "sacct -a -X -n -S 2000-01-01 -o JobID | wc -l"))

            idle = watched(lambda: time.sleep(8))
            out = root / "backups"
            took, rpcs, refused, longest = watched(lambda: invoke("backup", *where[:2],
                                                                  "--out", str(out)))  # fmt: skip
            archive_path = next(out.glob("*.tar"))
            size = archive_path.stat().st_size

            by_hand = root / "by-hand"
            by_hand.mkdir()
            start = time.perf_counter()
            to_file("mariadb", f"mariadb-dump --single-transaction --databases {JOBS}",
                    by_hand / "db.sql")  # fmt: skip
            to_file("slurmctld", "tar -C /var/spool/slurmctld -cf - .", by_hand / "state.tar")
            to_file("login", f"cd /jail && tar -cf - {JAIL}", by_hand / "jail.tar")
            hand = time.perf_counter() - start
            hand_size = sum(p.stat().st_size for p in by_hand.iterdir())

            invoke("down", "--volumes", *where)
            restore = invoke("restore", str(archive_path), *where)
            after = int(sh("slurmctld", "sacct -a -X -n -S 2000-01-01 -o JobID | wc -l"))
        finally:
            invoke("down", "--volumes", *where)
    print(f"B17 cluster: {records} job records, a 1.07 GB home (1 GiB of random bytes)")
    print(f"B17 backup: {took:.1f} s, {size / 1e9:.2f} GB; by hand (mariadb-dump + tar): "
          f"{hand:.1f} s, {hand_size / 1e9:.2f} GB; ratio time {took / hand:.2f}, size "
          f"{size / hand_size:.2f}")  # fmt: skip
    print(f"B17 slurmctld during the backup: {refused} of {rpcs} squeue calls refused, longest "
          f"answer {longest} ms; without a backup: {idle[2]} of {idle[1]} refused, longest "
          f"{idle[3]} ms")  # fmt: skip
    print(f"B17 restore to idle nodes: {restore:.1f} s; job records after it: {after}")


if __name__ == "__main__":
    main()
