# Attention from Scratch: `make book` and `make test` are all a newcomer needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
# nbgrader shells out to alembic and jupyter: the venv's bin must come first on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: venv book notebooks grade formgrader student-repo release test chapter lint clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python autograder/install_venv.py requirements.txt  # uv with pip's settings, pip if uv cannot
	touch $(STAMP)

venv: $(STAMP)  ## create .venv from requirements.txt

book: $(STAMP)  ## build the book into _build/html
	$(BIN)/python -m autograder.narratives  # the narratives the cache lacks, one per core, then the build takes them
	$(BIN)/jupyter-book build .

notebooks: $(STAMP)  ## regenerate the student notebooks in notebooks/ from autograder/source/
	$(BIN)/python -m autograder notebooks

grade: $(STAMP)  ## grade a class: make grade ASSIGNMENT=01_self_attention SUBMISSIONS=path/to/folder-or.zip
	@test -n "$(ASSIGNMENT)" -a -n "$(SUBMISSIONS)" || { echo "usage: make grade ASSIGNMENT=<id> SUBMISSIONS=<folder or .zip> [OUT=dir]"; exit 2; }
	$(BIN)/python -m autograder grade $(ASSIGNMENT) $(SUBMISSIONS) $(if $(OUT),--out $(OUT))

formgrader: $(STAMP)  ## nbgrader's formgrader in JupyterLab, served from autograder/: make formgrader [PORT=8888]
	$(BIN)/python -m autograder formgrader $(if $(PORT),--port $(PORT))

student-repo: book  ## the public student repository: make student-repo OUT=DIR [STUDENT_REPOSITORY=URL] (book/instructor.md)
	$(BIN)/python -m autograder student-repo $(or $(OUT),student-repo) \
		$(if $(STUDENT_REPOSITORY),--student-repository $(STUDENT_REPOSITORY))

release:  ## the old name of student-repo
	@echo "make release is now 'make student-repo OUT=DIR' (it writes the public student repository)"; exit 2

lint: $(STAMP)
	$(BIN)/ruff check .

# nbval runs Chapter 1's narrative cell by cell, a report per cell. Every narrative, this one included, also runs
# in the book build of tests/test_book.py (--all -W, allow_errors: false), which fails on any error: running
# Chapters 2 to 8 a second time here checked nothing more and cost a minute of a suite that must stay within 25.
NBVAL := book/01_self_attention.ipynb

# Two pytest-xdist workers: much of the suite waits on one serial process (a kernel, the book build, nbgrader),
# so two keep both cores of a small machine busy. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2

test: $(STAMP) lint  ## the whole suite: unit tests, grading, book build and browser test, leak scans, nbval
	$(BIN)/python -m pytest tests $(NBVAL) --nbval-lax --durations=25 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# One chapter's proof for a contributor (CONTRIBUTING.md, "Testing one chapter fast"): lint of the chapter's own
# files (python -m autograder.chapters A lists them), its catalogue in-process and
# its sample through the class grader, the visible checks' naming figure, its notebook conventions, release and
# nbgrader validate, its declared mistakes and the probe fuzz of its checks. make test stays the whole proof: it also
# grades a wrong answer of each catalogue with stock nbgrader (parity of the two graders).
chapter: $(STAMP)  ## one chapter's proof: make chapter A=05_positional_encoding
	@test -n "$(A)" || { echo "usage: make chapter A=<assignment id>, one of: $$(ls autograder/source | tr '\n' ' ')"; exit 2; }
	@test -d "autograder/source/$(A)" || { echo "no assignment $(A): one of $$(ls autograder/source | tr '\n' ' ')"; exit 2; }
	$(BIN)/ruff check $$($(BIN)/python -m autograder.chapters $(A))  # the chapter's own files, the scaffold's included
	$(BIN)/python -m pytest tests/test_catalogue.py tests/test_assignments.py tests/test_probe_fuzz.py \
		tests/test_known_mistakes.py -k "$(A) and not nbgrader_in_kernel_and_the_class_grader_agree" \
		-q -n $(TEST_WORKERS) --dist loadgroup

clean:
	rm -rf _build
