# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Model staging: one pinned revision of a Hub model repo onto a host, verified, resumable.

Host side (Python 3.10, typed). The module ``llmops.sglang.model_stage`` is a thin shell over
``stage.stage``. One job per file:

  errors.py    StageError: every failure the module reports (message names the value and the fix)
  layout.py    where a revision lives under the cache dir (snapshot, partial bytes, marker)
  listing.py   the revision's files (path, size, git blob id, LFS sha256) and the marker's JSON
  disk.py      free space at the cache dir (with the test seam) and the room check
  verify.py    a file against its listing entry: size, then sha256 (LFS) or git blob sha1
  hub.py       everything that talks to the Hub, through the pinned ``huggingface_hub``:
               revision -> commit, the file listing, one file's ranged (resumable) download
  progress.py  the progress file: one JSON line per update (bytes, files, rate)
  stage.py     the order: marker check, listing, room, download, verify, refetch, marker

``huggingface_hub`` is imported inside ``hub.py``'s functions only: the rest imports without it
(ansible-test's import test, the controller-side validation).
"""
