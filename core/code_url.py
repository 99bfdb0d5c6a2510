"""The one rule for a repository URL a job clones (or an image build fetches): forms, schemes, length.

Pure (no Django): the API's submission check, the executors' own check at launch and the image
builds all ask :func:`code_url_problem`, so a URL the portal accepts is one every executor runs.
"""

from __future__ import annotations

import re

# A git ref that cannot be read as a command-line option or a revision range.
GIT_REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/@+-]{1,200}(?<!\.lock)(?<![./])$")

SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")  # git@host:team/repo.git

REMOTE_SCHEMES = ("https", "ssh", "git")
# What git itself may speak when it clones (GIT_ALLOW_PROTOCOL): the same schemes; file only where local code is allowed.
GIT_ALLOW_PROTOCOL = ":".join(REMOTE_SCHEMES)

MAX_CODE_URL = 500  # the models' max_length (jobs.Job.code_url, images.ImageBuild.code_url)


def scheme_of(url: str) -> str:
    """The lower-cased scheme before '://', or "" for a path or an scp-like address."""
    return url.split("://", 1)[0].lower() if "://" in url else ""


def is_local_code(url: str) -> bool:
    """Does git read this code_url from this host's disk (file:// or a path)?"""
    if "://" in url:
        return scheme_of(url) == "file"
    # git's scp-like syntax, [user@]host:path, is remote when no slash comes before the colon.
    colon, slash = url.find(":"), url.find("/")
    return not (colon > 0 and (slash < 0 or colon < slash))


def local_path(url: str) -> str:
    """The folder a local code_url names (file:// or a plain path)."""
    return url[len("file://") :] if url.lower().startswith("file://") else url


def code_url_problem(
    url: str, *, allow_local: bool, https_only: bool = False, where: str = "this cluster"
) -> str | None:
    """What is wrong with ``url`` as a repository to clone, in words a person can act on; None when nothing is.

    ``allow_local``: the cluster runs code from its own disk (file:// or an absolute path).
    ``https_only``: the URL is a Kaniko build context (https only; '#' separates Kaniko's ref).
    ``where`` names the cluster in the local-code refusal.
    """
    noun = "repository URL" if https_only else "code URL"
    if not url:
        return "Give the git URL of the code, e.g. https://git.example.com/team/repo.git."
    if len(url) > MAX_CODE_URL:
        return f"Keep the {noun} under {MAX_CODE_URL} characters."
    scheme = scheme_of(url)
    if https_only:
        if any(ch.isspace() for ch in url) or "#" in url or url.startswith("-"):
            return "A repository URL cannot contain spaces or '#' or start with '-'."
        if scheme != "https" or not url.split("://", 1)[1].split("/", 1)[0]:
            return (
                "Kaniko fetches repositories over https; give an https:// URL, e.g. "
                "https://git.example.com/team/images.git."
            )
        return None
    if url.startswith("-") or any(ch.isspace() for ch in url):
        return "A code URL cannot start with '-' or contain spaces."
    remote = scheme in REMOTE_SCHEMES or (not scheme and bool(SCP_LIKE.match(url)))
    local = scheme == "file" or (not scheme and url.startswith("/"))
    if local and not allow_local:
        return f"{where} does not run code from local paths; use an https, ssh or git URL."
    if (remote or local) and "::" in url:  # git's <transport>::<address> syntax (ext:: runs a command)
        return "A code URL cannot contain '::' (git's transport syntax); use https://, ssh://, git:// or git@host:path."
    if remote or local:
        return None
    shown = f"'{scheme}://'" if scheme else "this form"
    return f"Code URLs with {shown} are not accepted; use https://, ssh://, git:// or git@host:path" + (
        " (or a local path on this cluster)." if allow_local else "."
    )
