"""Placing a failed build step in the user's Dockerfile and picking out the tool's own error lines."""

from __future__ import annotations

from evsys.images.build_errors import failed_step

DOCKERFILE = """FROM debian:bookworm-slim AS base
# a comment
RUN make

FROM base
RUN apt-get update && \\
    apt-get install -y foo
RUN make
"""

OUTPUT = """[1/2] STEP 1/4: FROM debian:bookworm-slim AS base
[1/2] STEP 2/4: ARG SSL_CERT_FILE
[1/2] STEP 3/4: ARG REQUESTS_CA_BUNDLE
[1/2] STEP 4/4: RUN make
make: nothing to do
[2/2] STEP 1/5: FROM 1a2b3c
[2/2] STEP 2/5: ARG SSL_CERT_FILE
[2/2] STEP 3/5: ARG REQUESTS_CA_BUNDLE
[2/2] STEP 4/5: RUN apt-get update &&     apt-get install -y foo
Get:1 http://deb.debian.org bookworm InRelease
[2/2] STEP 5/5: RUN make
make: *** No rule to make target 'all'.  Stop.
line 1 of noise
subprocess exited with status 2
Error: building at STEP "RUN make": exit status 2
"""


def test_the_second_run_of_an_instruction_is_its_second_line_in_the_file():
    step = failed_step(OUTPUT, DOCKERFILE)
    assert step is not None
    assert step.line == 8  # the second `RUN make`, not step 5 nor the first one on line 3
    assert step.reason == "exit status 2"
    assert step.error_lines == ["make: *** No rule to make target 'all'.  Stop."]
    assert step.headline("Dockerfile") == "Dockerfile:8: RUN make: exit status 2"


def test_a_continued_instruction_is_found_by_its_first_line():
    output = OUTPUT.split("[2/2] STEP 5/5")[0] + (
        "E: Unable to locate package foo\n"
        'Error: building at STEP "RUN apt-get update &&     apt-get install -y foo": exit status 100\n'
    )
    step = failed_step(output, DOCKERFILE)
    assert step is not None and step.line == 6
    assert step.error_lines == ["E: Unable to locate package foo"]


def test_output_without_steps_places_nothing():
    assert failed_step("Error: no storage\n", DOCKERFILE) is None
