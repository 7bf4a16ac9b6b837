"""Stand-in for the pip bootstrap script that ansible-test downloads for its sanity venvs.

ansible-test creates each sanity test's virtualenv without pip and bootstraps pip by running
``~/.ansible/test/cache/get_pip_<version>.py`` (pypa's get-pip), which it downloads from a
host outside the package registries, so the download fails here. Where that cache file is
missing, ``make sanity`` copies this script there: it installs the interpreter's bundled pip
(ensurepip) and then the requested packages (``pip==<version>``) from the package index.
ansible-test runs it as ``__main__`` with get-pip's arguments: pip install arguments plus
``--no-setuptools`` / ``--no-wheel``, which only tell get-pip not to add those packages.
"""
from __future__ import annotations

import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main(argv: list[str]) -> int:
    subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True,
                   stdout=subprocess.DEVNULL)
    args = [arg for arg in argv if arg not in GET_PIP_ONLY]
    return subprocess.run([sys.executable, "-m", "pip", "install", *args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
