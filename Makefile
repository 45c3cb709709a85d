# market-timers: `make demo` and `make test` are the two set-up commands (see README).
PYTHON ?= /usr/bin/python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXAMPLE := scripts/examples/market-timers.example.toml

# The Debian release `make deb` builds for: bookworm or trixie (inside a container of that
# release, root needed); empty: this machine's own release, built here.
DIST   ?=
DEBS   := bookworm trixie

.PHONY: venv demo test check test-unit test-e2e lint deb repo bench clean

# The runtime dependencies at the versions the .deb ships (requirements.lock, debian/rules), so
# that the tests run on them; the test tools at their latest.
$(VENV)/.installed: pyproject.toml requirements.lock
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { echo "make: $(PYTHON) cannot \
	create a virtualenv: install the Debian package python3-venv (apt install python3-venv)" >&2; \
	exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements.lock -e '.[test]'
	touch $@

# The pre-fire's wait-then-exec (prefire.py), next to the venv's python as in the package.
EXEC_AT := $(VENV)/bin/market-timers-exec-at
CC      ?= cc
# Without a compiler or the C library's headers: one line naming the Debian packages.
$(EXEC_AT): generator/exec_at.c $(VENV)/.installed
	@printf '#include <time.h>\nint main(void){return 0;}\n' | \
	    $(CC) -x c -o /dev/null - >/dev/null 2>&1 || { echo "make: cannot build \
	market-timers-exec-at: no working C compiler ($(CC)) with the C library's headers; \
	install the Debian packages gcc and libc6-dev (apt install gcc libc6-dev)" >&2; exit 1; }
	$(CC) -O2 -Wall -Wextra -Werror -o $@ generator/exec_at.c

venv: $(VENV)/.installed $(EXEC_AT)

# The calendar at work on a fixed window of the example config (the same output every day): the
# US DST change, a holiday and a 13:00 early close; then the next sessions' units rendered and
# checked with systemd-analyze, and what to do next.
MT := $(VENV)/bin/market-timers --config $(EXAMPLE)
demo: venv
	@echo "== signal, 15 min before the NYSE close. US clocks go back on Sunday 2026-11-01:"
	@echo "   the UTC instant moves from 19:45 to 20:45, New York's stays at 15:45"
	@$(MT) plan --job signal --from 2026-10-29 --to 2026-11-03
	@echo "== Thanksgiving (Thursday 2026-11-26): closed, no fire; Friday closes at 13:00, so 12:45"
	@$(MT) plan --job signal --from 2026-11-24 --to 2026-11-30
	@echo "== every job of the example, the next sessions: rendered and checked"
	@rm -rf build/units && mkdir -p build
	@$(MT) render --out build/units > build/render.log && tail -n 1 build/render.log
	@$(MT) verify build/units
	@echo "== next: make deb DIST=bookworm (or trixie; root, in a container of that release) &&"
	@echo "   apt install ./dist/*/market-timers_*.deb; edit"
	@echo "   /etc/market-timers/market-timers.toml; market-timers plan --summary;"
	@echo "   market-timers try <job>; market-timers sync (README: Install)"

# ruff, then the import contract (pyproject.toml [tool.importlinter]: the flows' layers).
lint: venv
	$(VENV)/bin/ruff check generator tests scripts bench
	cd generator && ../$(VENV)/bin/lint-imports ../pyproject.toml

# Everything: lint, the unit tier and both releases' e2e tests, side by side in seven pytest-xdist
# workers (tests/parallelrun.py: the unit tier, and per release its cluster tests and the others
# in two containers; the .debs build while the unit tier runs). Ends with pytest's one summary line, then the total.
test: venv
	@start=$$(date +%s); status=0; \
	$(MAKE) --no-print-directory lint && \
	$(PY) -m pytest tests -n 7 --dist loadgroup --durations=40 || status=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s in all, exit status $$status"; \
	exit $$status

# The unit tier alone, for development (HACKING.md); `make test` is what CI runs.
check test-unit: venv
	$(PY) -m pytest tests -m 'not e2e'

test-e2e: venv
	$(PY) -m pytest tests -m e2e

deb:
	./scripts/build-deb $(DIST)

# dist/repo: a flat apt repository with the .deb of every release in $(DEBS), one index each
# (each built inside its release's container, unless dist/ holds one newer than the sources).
repo:
	debs=$$($(PYTHON) -m tests.e2e.debpkg $(DEBS)) && ./scripts/make-repo dist/repo $$debs

bench: venv
	$(PY) bench/run.py

clean:
	rm -rf build dist
