"""Fetch one Hugging Face revision into a directory of its own, or check one fetched (fleet/weights/hub.py).

Run on the host, sent whole as `python3 -c <this file> ARGS` (fleet.weights.hub.FETCH), or by hand:

    python3 fetch_revision.py REPO REVISION FINAL MARGIN_BYTES STAGING
    python3 fetch_revision.py --verify DIR

The fetch runs under the client's Python (huggingface_hub on its PYTHONPATH): the revision's files
are fetched into STAGING (resumed: a file of the right size is kept, another fetched again), each
checked against its sha256 or git blob id where the endpoint gives one, the manifest written, and
STAGING renamed to FINAL. Its answer is framed as fleet.core.wire's: a marker line `@@KEY[=VALUE]`, and
for a record with text, that text as one base64 line. --verify (any Python 3: it imports no client)
prints each file of DIR's manifest whose size or digest differs.

Only the standard library and huggingface_hub: nothing of the deploy is importable on a host.
"""

import base64
import hashlib
import os
import shutil
import sys

MANIFEST = ".sglang-fleet-files"  # fleet.weights.hub.MANIFEST: written last, `SIZE DIGEST NAME` a line
LIMIT = 4000  # fleet.weights.hub.SAID_LIMIT: characters of the client's words sent back
USAGE = ("usage: fetch_revision.py REPO REVISION FINAL MARGIN_BYTES STAGING\n"
         "       fetch_revision.py --verify DIR\n")


def say(key, value="", text=None):
    """A record: its marker line, then its text (the last LIMIT characters) as base64."""
    sys.stdout.write("@@" + key + ("=" + value if value else "") + "\n")
    if text is not None:
        sys.stdout.write(base64.b64encode(text[-LIMIT:].encode("utf-8", "replace")).decode() + "\n")
    sys.stdout.flush()


def reason(e):
    return type(e).__name__ + ": " + str(e)


def wrong(files, root, name, hashed):
    """Why root/name is not the file `files` lists (its size; its digest too if hashed), or None."""
    path = os.path.join(root, name)
    size, digest = files[name]
    try:
        n = os.path.getsize(path)
    except OSError:
        return "missing"
    if n != size:
        return "%d bytes, expected %d" % (n, size)
    if not hashed or digest == "-":
        return None
    kind, want = digest.split(":")
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return None if h.hexdigest() == want else kind + " differs"


def manifest_line(line):
    """(name, (size, digest)) of one manifest line as fetch() writes it, or None for any other line."""
    parts = line.rstrip("\n").split(" ", 2)
    if len(parts) != 3 or not parts[2] or not (parts[0].isascii() and parts[0].isdigit() and len(parts[0]) <= 15):
        return None
    size, digest, name = parts
    kind, _, want = digest.partition(":")
    if digest != "-" and not ((kind, len(want)) in (("sha256", 64), ("blob", 40))
                              and all(c in "0123456789abcdef" for c in want)):
        return None
    return name, (int(size), digest)


def verify(root):
    """make verify: every file of a revision's manifest, its size and digest; a line not of the manifest's
    form is said as damaged too (the revision is fetched again), never a traceback."""
    files = {}
    with open(os.path.join(root, MANIFEST), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            read = manifest_line(line)
            if read is None:
                print("%s line %d: not SIZE DIGEST NAME (sha256:HEX64, blob:HEX40 or -): damaged" % (MANIFEST, number))
            else:
                files[read[0]] = read[1]
    for name in sorted(files):
        why = wrong(files, root, name, True)
        if why:
            print(name + ": " + why)
    return 0


def listed(repo, revision, get_hf_file_metadata, hf_hub_url, info):
    """The revision's files, name -> (size, digest or "-"), or None once a record said why not."""
    files = {}
    for s in info.siblings or []:
        name = s.rfilename
        parts = name.split("/")
        if (not name or len(name) > 1024 or any(p in ("", ".", "..") for p in parts) or parts[0] == ".cache"
                or name == MANIFEST or any(ord(c) < 32 or ord(c) == 127 for c in name)):
            say("unsafe", "", name)
            return None
        size, lfs = s.size, s.lfs
        digest = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
        digest = "sha256:" + digest if digest else None
        if size is None or digest is None:
            try:
                meta = get_hf_file_metadata(hf_hub_url(repo, name, revision=revision))
            except Exception as e:
                say("error", "metadata", name + ": " + reason(e))
                return None
            size = meta.size if size is None else size
            etag = (meta.etag or "").strip('"').lower()
            if digest is None and len(etag) in (40, 64) and all(c in "0123456789abcdef" for c in etag):
                digest = ("sha256:" if len(etag) == 64 else "blob:") + etag
        if not isinstance(size, int) or size < 0:
            say("error", "metadata", name + ": no size from the endpoint")
            return None
        files[name] = (size, digest or "-")
    return files


def drop(staging, name):
    """A staged file and the client's metadata of it, removed: the client fetches it again."""
    for p in (os.path.join(staging, name),
              os.path.join(staging, ".cache", "huggingface", "download", name + ".metadata")):
        if os.path.lexists(p):
            os.remove(p)


def fetch(repo, revision, final, margin, staging):
    parent = os.path.dirname(final)
    try:
        from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url, snapshot_download
    except Exception as e:
        say("client", "broken", reason(e))
        return 0
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except Exception as e:
        say("error", "metadata", reason(e))
        return 0
    if info.sha != revision:
        say("error", "revision", "the endpoint answered commit " + str(info.sha))
        return 0
    files = listed(repo, revision, get_hf_file_metadata, hf_hub_url, info)
    if files is None:
        return 0
    os.makedirs(parent, exist_ok=True)
    if os.path.isdir(final) and not os.path.isdir(staging):  # damaged: fetched again beside it, kept until then
        shutil.copytree(final, staging, copy_function=os.link, symlinks=True)
        if os.path.lexists(os.path.join(staging, MANIFEST)):
            os.remove(os.path.join(staging, MANIFEST))
    os.makedirs(staging, exist_ok=True)
    for top, _, names in os.walk(os.path.join(staging, ".cache")):  # a killed client's: it resumes none of them
        for n in names:
            if n.endswith(".incomplete"):
                os.remove(os.path.join(top, n))
    have = 0
    for name in files:
        if wrong(files, staging, name, False) is None:
            have += files[name][0]
        else:
            drop(staging, name)  # the client would keep a file of the wrong size its metadata calls done
    total = sum(size for size, _ in files.values())
    st = os.statvfs(parent)
    free = st.f_bavail * st.f_frsize
    say("sizes", "%d %d %d %d" % (len(files), total, have, free))
    if free < total - have + margin:
        say("disk", "%d %d" % (free, total - have + margin))
        return 0
    check = list(files)
    for _ in (1, 2):
        try:
            snapshot_download(repo, revision=revision, local_dir=staging)
        except Exception as e:
            say("error", "download", reason(e))
            return 0
        bad = {}
        for name in check:
            why = wrong(files, staging, name, True)
            if why:
                bad[name] = why
        if not bad:
            break
        for name in bad:
            drop(staging, name)
        check = list(bad)
    if bad:
        say("integrity", str(len(bad)), "\n".join(n + ": " + w for n, w in sorted(bad.items())[:20]))
        return 0
    with open(os.path.join(staging, MANIFEST + ".tmp"), "w") as f:
        for name in sorted(files):
            f.write("%d %s %s\n" % (files[name][0], files[name][1], name))
    os.replace(os.path.join(staging, MANIFEST + ".tmp"), os.path.join(staging, MANIFEST))
    old = staging + ".old"
    if os.path.isdir(final):
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(staging, final)
    shutil.rmtree(old, ignore_errors=True)
    say("fetched", "%d %d" % (total, total - have))
    return 0


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    if len(args) == 2 and args[0] == "--verify":
        return verify(args[1])
    if len(args) == 5:
        try:
            margin = int(args[3])
        except ValueError:
            margin = None
        if margin is not None:
            return fetch(args[0], args[1], args[2], margin, args[4])
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
