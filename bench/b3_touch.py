"""B3: touching one login-only file rebuilds exactly the login image.

Works on a copy of the project (sharing the source cache), so the checkout is left untouched;
the real project is rebuilt at the end to put the original login image back.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.common import built, copy_project, invoke

LOGIN_FILE = Path("images/login/sshd_config.d/slurmforge.conf")


def main() -> None:
    invoke("build", "--set", "default")
    with tempfile.TemporaryDirectory() as tmp:
        copy = copy_project(Path(tmp))

        invoke("build", "--set", "default", root=copy)
        print(f"B3 copy of the project, nothing changed: rebuilt {built(copy)}")
        os.utime(copy / LOGIN_FILE)
        invoke("build", "--set", "default", root=copy)
        print(f"B3 mtime-only touch of {LOGIN_FILE}: rebuilt {built(copy)}")
        path = copy / LOGIN_FILE
        path.write_text(path.read_text() + "# B3 edit\n")
        seconds = invoke("build", "--set", "default", root=copy)
        rebuilt = built(copy)
        print(
            f"B3 content change of {LOGIN_FILE}: rebuilt {rebuilt} in {seconds:.1f} s "
            f"({'OK' if len(rebuilt) == 1 and rebuilt[0].startswith('login/') else 'FAIL'})"
        )
    seconds = invoke("build", "--set", "default")
    print(f"B3 restore original login image: rebuilt {built()} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
