"""A trial's environment image: which tasks run on an image, getting that image from `evsys.images`, and the
trial's sandbox spec moved onto it.

A task runs on an image when its Dockerfile needs a build (RUN, a base the host does not provably provide:
evsys.task.hostbase) or its task.toml names such a `docker_image`, and on any backend that does not run on
this host's root filesystem (`Capability.HOST_ROOTFS`) whenever it declares a base; unless the job skips
builds. A trial on the host rootfs in place of a declared base records that base with source "host", what
stood in (`key`: `host:debian-12+python3.11` with the thin python layer) and `ran_on_host_image`. Tasks
with no Dockerfile and Python tasks keep the host rootfs.
The images come from the trial's `ImageServices` (evsys.engine.image_services: the job's, shared by its
trials, so concurrent trials of one task wait for a single build; its build progress on the job's event
stream). The build log goes to `<trial>/environment/build.log`; the build is bounded by
the trial's `build_timeout_sec` (the task's, scaled by the job's setup multiplier when planned). A backend
that pulls and builds images itself (`Capability.REMOTE_IMAGES`: modal) is handed the task's `docker_image`
or Dockerfile instead, and nothing is built here.
"""

from __future__ import annotations

from evsys.engine.trial.state import TrialState
from evsys.records import FailureCause, FileCopy, ImageSpec, SandboxSpec, TrialImage
from evsys.sandbox.base import Capability
from evsys.sandbox.registry import sandbox_class
from evsys.task.dockerfile import DOCKERFILE
from evsys.task.hostbase import host_facts, host_stand_in
from evsys.task.models import Task
from evsys.util.hostca import SANDBOX_CA_PATH, ca_environment, host_ca_bundle

BUILD_LOG = "environment/build.log"


def needs_image(task: Task, skip_build: bool, sandbox: str) -> bool:
    """True when the task runs on a built or pulled image rather than the host rootfs (on the backend
    `sandbox`)."""
    if skip_build:
        return False
    if task.environment.needs_image:
        return True
    on_host = sandbox_class(sandbox).supports(Capability.HOST_ROOTFS)
    return task.environment.base_image is not None and not on_host


def host_python(task: Task) -> str | None:
    """The major.minor of the thin python layer with which the host rootfs provides the task's declared
    base (evsys.task.hostbase), if it does so."""
    base = task.environment.base_image
    stand_in = host_stand_in(base) if base is not None else None
    return stand_in.python_layer if stand_in is not None else None


def on_host(state: TrialState, task: Task) -> bool:
    """Record the host's root filesystem standing in for the task's declared base (`image.source` "host",
    `ran_on_host_image`). False, with the failure recorded, on a backend with no host rootfs: its sandbox
    would run another base (a daemon's default image), which a trial never does."""
    base = task.environment.base_image
    if base is None:
        return True
    backend = state.spec.sandbox
    if not sandbox_class(backend).supports(Capability.HOST_ROOTFS):
        state.fail(
            FailureCause.ENVIRONMENT_BUILD_FAILED,
            f"the task declares {base}, but --skip-build runs it on the host rootfs, which the {backend} "
            "backend does not have (it would run another base): run it without --skip-build",
        )
        return False
    stand_in = host_stand_in(base)
    state.result.image = TrialImage(
        ref=base, source="host", key=stand_in.name if stand_in else host_facts().name()
    )
    state.result.ran_on_host_image = True
    if task.environment.needs_image:  # only --skip-build puts it here: say what the host lacks
        reasons = "; ".join(task.environment.image_reasons)
        state.result.warnings.append(f"--skip-build: ran on the host rootfs in place of {base} ({reasons})")
    return True


def image_spec(spec: SandboxSpec, task: Task, image: ImageSpec) -> SandboxSpec:
    """`spec` on an image: the image brings the Dockerfile's files, ENV, WORKDIR and USER; the compose file's
    `main` environment and task.toml's `[environment] env` and `workdir` still apply on top. A sandbox with
    network also gets the host's CA bundle and the variables pointing tools at it (the host rootfs has it
    already; an image does not), unless the task sets them itself."""
    env = task.config.environment
    user = image.config.user or ""
    files: list[FileCopy] = []
    variables: dict[str, str] = {}
    compose = task.environment.compose
    compose_environment = dict(compose.main_environment) if compose is not None else {}
    bundle = host_ca_bundle()
    if spec.network != "no-network" and bundle is not None:
        files.append(FileCopy(src=bundle, dst=SANDBOX_CA_PATH))
        variables = ca_environment(SANDBOX_CA_PATH)
    return spec.model_copy(
        update={
            "image": image,
            "host_python": None,
            "files": files,
            "env": variables | compose_environment | dict(env.env),
            "workdir": env.workdir or image.config.workdir or task.environment.workdir,
            "user": "root" if user.split(":")[0] in ("root", "0") else spec.user,
        }
    )


def build_timeout(state: TrialState, task: Task) -> float:
    """The trial's limit on building its images: as planned, else (a spec made by hand) the task's own."""
    planned = state.config.build_timeout_sec
    return planned if planned is not None else task.config.environment.build_timeout_sec


def remote_image(task: Task) -> ImageSpec:
    """The task's image for a backend that pulls and builds images itself (`Capability.REMOTE_IMAGES`): its
    `docker_image`, else its Dockerfile."""
    docker_image = task.config.environment.docker_image
    if docker_image:
        return ImageSpec(ref=docker_image)
    return ImageSpec(ref=f"{task.name} ({DOCKERFILE})", dockerfile=task.path / DOCKERFILE)


async def on_image(state: TrialState, task: Task, spec: SandboxSpec) -> SandboxSpec | None:
    """`spec` moved onto the task's image (built, pulled or cached now, recorded on the result; or, for a
    backend that builds images itself, named for it to build); None once a failed build is recorded."""
    if sandbox_class(state.spec.sandbox).supports(Capability.REMOTE_IMAGES):
        remote = remote_image(task)
        state.result.image = TrialImage(ref=remote.ref, source="remote")
        return image_spec(spec, task, remote)
    from evsys.images import ImageError

    trial_dir = state.store.trial_dir(state.config.trial_name)
    notices: list[str] = []
    try:
        image = await state.timed(
            "environment_build",
            state.images.task_image(
                task,
                trial_dir / BUILD_LOG,
                pull_policy=state.spec.pull,
                timeout=build_timeout(state, task),
                notices=notices,
            ),
        )
    except ImageError as exc:
        state.fail(FailureCause.ENVIRONMENT_BUILD_FAILED, f"{exc} (log: {BUILD_LOG})")
        return None
    finally:
        state.result.warnings += notices
    state.result.image = TrialImage(
        ref=image.spec.ref,
        source=image.source,
        key=image.key,
        synthesised_bases=image.synthesised_bases,
        pull_error=image.pull_error,
        seconds=image.seconds,
    )
    state.result.warnings += [
        f"the base {base} is synthesised from package mirrors, not the official image"
        for base in image.synthesised_bases
    ]
    return image_spec(spec, task, image.spec)
