# The course in five targets. `make course` is the main job, `make test` runs every test; both set
# up the virtual environment first when a requirements file or pyproject.toml changed.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist workers for make test. One more than CI's 2 cores: a worker often waits (kernels
# starting, a browser rendering, phases that sleep), and 3 finished the suite a minute sooner.
JOBS ?= 3
# nbgrader calls the `alembic` command of its own environment.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup course grade export views test check lint lab benchmark grading-benchmark clean gpu-check gpu-wheels

setup: $(STAMP)

$(STAMP): requirements.txt requirements-test.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt -e .
	touch $@

# Regenerate release/ and notebooks/, grade the demo classes, write feedback/ and grades.csv.
# DEMO=representative (default) grades one demo student of each kind per lesson; DEMO=all grades
# every one, as `make test` does.
DEMO ?= representative
course: setup
	$(BIN)/python -m course_tools.jobs.grade_demo_class --demo $(DEMO)

# Grade every submission of ASSIGNMENT (or ASSIGNMENT=all) in submitted/, one Dask task per student:
# WORKERS=4 local worker processes, or SCHEDULER=tcp://host:8786; DB=<gradebook URL> (default: sqlite).
# Run it again after an interruption: it grades only what is not graded yet. STUDENTS="a b" limits it.
ASSIGNMENT ?= all
grade: setup
	WORKERS="$(WORKERS)" SCHEDULER="$(SCHEDULER)" DB="$(DB)" \
	  $(BIN)/python -m course_tools.jobs.grade_class $(ASSIGNMENT) $(STUDENTS)

# The gradebook as the files a learning-management system imports, into exports/: Canvas's and
# Moodle's grade CSVs, nbgrader's own CSV and the scores a late penalty reduced. MAPPING names the CSV
# of nbgrader ids to the LMS's ids (default lms_students.csv); a student missing from it stops the export.
export: setup
	$(BIN)/python -m course_tools.jobs.export_grades $(if $(MAPPING),--mapping $(MAPPING)) $(if $(DB),--db $(DB))

# Regenerate release/ (student versions) and notebooks/ (executed solutions) from source/.
views: setup
	$(BIN)/python -m course_tools.jobs.build_views

# Lint, unit tests, pipeline, grading of the demo class and nbval over notebooks/, $(JOBS) workers.
# Whole scopes go to the workers in the order tests/conftest.py sorts them, the longest first:
# pytest-xdist would otherwise reorder them by their number of tests and start the longest last.
# The 25 slowest tests close the log: where CI's time goes, run after run (docs/run-time.md).
test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(JOBS) --dist loadscope --no-loadscope-reorder --durations=25

# The fast tier, for a change to one helper or tool: lint and every test not marked slow or browser
# (no demo-class grading, no nbval, no Chromium).
check: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(JOBS) -m "not slow and not browser" tests

lint: setup
	$(BIN)/ruff check .

lab: setup
	$(BIN)/jupyter lab --notebook-dir=.

# Measure each notebook's run time on this machine (the table in docs/run-time.md).
benchmark: setup
	$(BIN)/python -m course_tools.measure.notebook_times --update-readme

# Grade a synthetic class (32 submissions) four ways: nbclient alone, stock nbgrader, the course's
# grader serially and with 2 workers; the grading table in docs/run-time.md (about 10 minutes on 2 cores).
grading-benchmark: setup
	$(BIN)/python -m course_tools.measure.grading_benchmark --update-readme $(GRADING_BENCHMARK_ARGS)

clean:
	rm -rf submitted feedback gradebook.db grades.csv cell_times.csv .grading exports
	find autograded -mindepth 1 -not -name README.md -exec rm -rf {} +

# On a CUDA GPU: every worked notebook at real size under nbval, and the figures the notebooks
# recorded, into gpu-report/ (report.md, report.json). Uses the machine's own torch; without a GPU,
# the same notebooks on the CPU. GPU_CHECK_ARGS passes options on, e.g. "--lessons 04_memory".
gpu-check:
	bash course_tools/measure/gpu_check.sh $(GPU_CHECK_ARGS)

# The wheels gpu-check needs besides torch (CPython 3.12, x86_64 Linux) into gpu-wheels/, for a
# GPU machine without internet: copy that folder into the repository there.
gpu-wheels:
	PYTHON=$(PYTHON) bash course_tools/measure/gpu_check.sh --wheels
