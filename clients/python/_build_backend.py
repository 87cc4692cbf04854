"""A PEP 517 build backend in the standard library only, so that
``pip install ./clients/python`` works with nothing but pip installed (no
setuptools or wheel download; machines without network access included).

It builds one pure-Python wheel from the ``lockd_client`` package, and an
sdist of this directory. Nothing else is needed for a package this size.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "lockd_client"
DIST = "lockd-client"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))

METADATA = f"""Metadata-Version: 2.1
Name: {DIST}
Version: {VERSION}
Summary: Client for the lockd lock server: pipelined, keeps leases alive, follows the leader
License: MIT
Requires-Python: >=3.10
Description-Content-Type: text/markdown

"""


def _metadata() -> str:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return METADATA + f.read()


def _package_files():
    root = os.path.join(HERE, NAME)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in sorted(filenames):
            if name.endswith((".py", ".typed")):
                full = os.path.join(dirpath, name)
                yield full, os.path.relpath(full, HERE).replace(os.sep, "/")


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    filename = f"{NAME}-{VERSION}-py3-none-any.whl"
    info = f"{NAME}-{VERSION}.dist-info"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as whl:
        def add(arcname: str, data: bytes) -> None:
            whl.writestr(arcname, data)
            records.append(_record_line(arcname, data))

        for full, arcname in _package_files():
            with open(full, "rb") as f:
                add(arcname, f.read())
        add(f"{info}/METADATA", _metadata().encode())
        add(f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: lockd _build_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        records.append(f"{info}/RECORD,,")
        whl.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return filename


def build_sdist(sdist_directory, config_settings=None):
    base = f"{DIST}-{VERSION}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for name in ("pyproject.toml", "README.md", "_build_backend.py"):
            tar.add(os.path.join(HERE, name), f"{base}/{name}")
        for full, arcname in _package_files():
            tar.add(full, f"{base}/{arcname}")
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tar.addfile(ti, io.BytesIO(pkg_info))
    return filename
