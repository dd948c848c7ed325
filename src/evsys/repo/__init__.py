"""Repository environments: SWE-bench-family rows (`RepoTask`), the repo cache, and running them as tasks.

`load_repo_tasks(path)` reads JSONL, Parquet or a saved Hugging Face dataset; `RepoCache` keeps one bare
mirror per repository and makes per-trial checkouts; `write_task_dir` turns a row into a Harbor task
directory; `evsys.repo.fresh` grades a row outside the agent's reach (its change, computed on the host and
filtered by `evsys.repo.change`, applied with the test patch to a fresh tree in a fresh sandbox, the tests run
by `evsys.repo.runner` as an unprivileged user, scored by `evsys.repo.grade`).
"""

from evsys.repo.cache import RepoCache, RepoCacheError
from evsys.repo.rows import RepoRowsError, RepoRowSet, RepoTask, RowError, load_repo_rows, load_repo_tasks

__all__ = [
    "RepoCache",
    "RepoCacheError",
    "RepoRowSet",
    "RepoRowsError",
    "RepoTask",
    "RowError",
    "load_repo_rows",
    "load_repo_tasks",
]
