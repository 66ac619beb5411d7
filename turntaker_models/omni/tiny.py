"""Tiny random Qwen3-Omni weights of the real classes, plus a locally trained tokenizer.

The serving code, the tests and `turntaker triton` on a fresh clone all need a checkpoint that
looks like the real one (same config classes, same special tokens, same file layout) but builds
in a second without any download. Random weights give near-silent audio and gibberish text;
that is enough to check shapes, lengths, streaming exactness and determinism.

Laid out as Qwen's checkpoint is, so that `Qwen3OmniMoeProcessor.from_pretrained` reads it:
`preprocessor_config.json` holds the Whisper feature extractor and the Qwen2-VL image processor
together; `tokenizer_config.json` names the multimodal tokens the processor reads
(`image_token`, `audio_bos_token`, ...); `chat_template.jinja` is a chat template of the
structure of Qwen's (written here, not copied: see CHAT_TEMPLATE). The image processor's patch,
temporal patch and merge sizes are the vision tower's; its pixel bounds are tiny (a 64x48 image
becomes 4 image tokens) so that tests stay fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turntaker_models.omni.checkpoint_dir import build_in_place

# Special tokens in the order they get ids after the byte alphabet; names as in Qwen's vocabulary.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
)
# Role names are single tokens in Qwen's vocabulary; the talker finds turns by them.
ROLE_TOKENS = ("system", "user", "assistant")
# Function-calling markers: single tokens in Qwen's vocabulary too, and, as there, added tokens
# that are not special (a decode with skip_special_tokens keeps them, so the streamed text
# shows where a call starts and ends).
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
TOKENIZER_VOCAB = 384
# The names under which transformers' processors look the multimodal tokens up on a tokenizer
# (Qwen3OmniMoeProcessor.__init__), as in Qwen's tokenizer_config.json.
MULTIMODAL_TOKENS = {
    "image_token": "<|image_pad|>",
    "audio_token": "<|audio_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}
# The structure of Qwen's Qwen3-Omni template (each message `<|im_start|>role\n...<|im_end|>\n`,
# content lists of text/image/audio/video items, the generation prompt `<|im_start|>assistant\n`)
# with the tool-calling layout of Qwen3's templates (Hermes style): the tools as one JSON line
# each inside `<tools></tools>` in the system turn (after the system prompt, if any), an
# assistant's calls as `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>` after its
# text, and tool results as `<tool_response>` blocks of one user turn per run of tool messages.
# Written here, not copied: Qwen's own text was not available offline.
CHAT_TEMPLATE = """\
{%- macro render_content(content) %}
    {%- if content is string %}
        {{- content }}
    {%- elif content is not none %}
        {%- for item in content %}
            {%- if item.type == 'image' or 'image' in item or 'image_url' in item %}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif item.type == 'audio' or 'audio' in item or 'audio_url' in item %}
                {{- '<|audio_start|><|audio_pad|><|audio_end|>' }}
            {%- elif item.type == 'video' or 'video' in item %}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' }}
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
{%- endmacro %}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\\n\\n' }}
    {%- endif %}
    {{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' + tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and ' }}
    {{- 'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n' }}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>' }}
    {{- '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first and tools %}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + render_content(message.content) + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {%- set content = render_content(message.content) %}
        {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if content or not loop.first %}
                {{- '\\n' }}
            {%- endif %}
            {%- if tool_call.function %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Codec vocabulary of the tiny talker: codes below CODEBOOK_SIZE, control ids in the top 1024
# (generate() suppresses that band except codec EOS), as in the real checkpoint.
CODEBOOK_SIZE = 64
NUM_CODE_GROUPS = 4
TALKER_VOCAB = CODEBOOK_SIZE + 1024
HIDDEN = 64
# Vision tower patching (the real checkpoint's values); the image processor must use the same.
PATCH_SIZE = 16
TEMPORAL_PATCH_SIZE = 2
SPATIAL_MERGE_SIZE = 2
# Pixel bounds of the tiny image processor: 1 to 16 image tokens per image.
MIN_PIXELS = 32 * 32
MAX_PIXELS = 128 * 128

_CORPUS = """\
Turn taking is the way people share a conversation. One person speaks, the other listens, and
then they change roles. A good voice assistant knows when the user has finished speaking, answers
quickly, and stops talking at once when the user interrupts it. Hello, how are you today? I am
fine, thank you. What time is it? It is a quarter past three in the afternoon. Could you tell me
the weather for tomorrow? Tomorrow will be sunny with a light breeze from the west. Please read
me the news. Here are the headlines for this morning. The numbers one two three four five six
seven eight nine ten. Yes, no, maybe, of course, certainly, I am not sure, let me think about it.
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with one step.
Speech is sampled sixteen thousand times per second and spoken answers twenty four thousand.
"""


def _train_tokenizer(out_dir: Path) -> None:
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # transformers' own annotations are partial; treat the library as untyped.
    tf: Any = transformers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Several passes of one fixed text: training is deterministic, so the ids are too.
    tokenizer.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    tokenizer.add_tokens([*ROLE_TOKENS, *TOOL_TOKENS])
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        extra_special_tokens=dict(MULTIMODAL_TOKENS),
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))


def _token_ids(out_dir: Path) -> dict[str, int]:
    import transformers

    tf: Any = transformers
    tokenizer = tf.PreTrainedTokenizerFast.from_pretrained(str(out_dir), local_files_only=True)
    ids: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *ROLE_TOKENS, *TOOL_TOKENS):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if not isinstance(token_id, int) or token_id == tokenizer.unk_token_id:
            raise RuntimeError(f"tiny tokenizer lacks {token}")
        ids[token] = token_id
    ids["__vocab__"] = len(tokenizer)
    return ids


def _rope(head_dim: int) -> dict[str, Any]:
    half = head_dim // 2
    hw = half // 4
    return {
        "rope_type": "default",
        "rope_theta": 1000000.0,
        "mrope_section": [half - 2 * hw, hw, hw],
        "mrope_interleaved": True,
        "interleaved": True,
    }


def tiny_config_dict(ids: dict[str, int]) -> dict[str, Any]:
    """The Qwen3OmniMoeConfig fields of the tiny model, given the tokenizer's special ids."""
    heads, kv_heads = 4, 2
    head_dim = HIDDEN // heads
    vocab = ids["__vocab__"]
    media = {
        "audio_token_id": ids["<|audio_pad|>"],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "audio_start_token_id": ids["<|audio_start|>"],
        "position_id_per_seconds": 13,
    }
    # Codec control ids in the suppressed band, as in the real checkpoint.
    band = CODEBOOK_SIZE
    thinker = {
        "text_config": {
            "vocab_size": vocab,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "head_dim": head_dim,
            "max_position_embeddings": 8192,
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "rope_parameters": _rope(head_dim),
        },
        "audio_config": {
            "num_mel_bins": 32,
            "encoder_layers": 2,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "d_model": 32,
            "output_dim": HIDDEN,
            "downsample_hidden_size": 16,
            "n_window": 50,
            "n_window_infer": 800,
            "max_source_positions": 1500,
        },
        "vision_config": {
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": HIDDEN,
            "deepstack_visual_indexes": [0],
            "num_position_embeddings": 256,
            "in_channels": 3,
            "patch_size": PATCH_SIZE,
            "temporal_patch_size": TEMPORAL_PATCH_SIZE,
            "spatial_merge_size": SPATIAL_MERGE_SIZE,
        },
        "user_token_id": ids["user"],
        **media,
    }
    talker = {
        "text_config": {
            "vocab_size": TALKER_VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "head_dim": head_dim,
            "max_position_embeddings": 8192,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "rope_parameters": _rope(head_dim),
        },
        "code_predictor_config": {
            "vocab_size": CODEBOOK_SIZE,
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "head_dim": head_dim,
            "num_code_groups": NUM_CODE_GROUPS,
        },
        "num_code_groups": NUM_CODE_GROUPS,
        "thinker_hidden_size": HIDDEN,
        "accept_hidden_layer": 1,
        "codec_pad_id": band + 4,
        "codec_bos_id": band + 5,
        "codec_eos_token_id": band + 6,
        "codec_nothink_id": band + 11,
        "codec_think_bos_id": band + 12,
        "codec_think_eos_id": band + 13,
        "speaker_id": {"ethan": band + 20, "chelsie": band + 21, "aiden": band + 22},
        "spatial_merge_size": SPATIAL_MERGE_SIZE,
        **media,
    }
    code2wav = {
        "codebook_size": CODEBOOK_SIZE,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "num_quantizers": NUM_CODE_GROUPS,
        "decoder_dim": 32,
        "sliding_window": 72,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
    }
    return {
        "thinker_config": thinker,
        "talker_config": talker,
        "code2wav_config": code2wav,
        "im_start_token_id": ids["<|im_start|>"],
        "im_end_token_id": ids["<|im_end|>"],
        "tts_pad_token_id": ids["<tts_pad>"],
        "tts_bos_token_id": ids["<tts_text_bos>"],
        "tts_eos_token_id": ids["<tts_text_eod>"],
        "system_token_id": ids["system"],
        "user_token_id": ids["user"],
        "assistant_token_id": ids["assistant"],
    }


def _write(out_dir: Path, seed: int) -> None:
    import torch
    import transformers

    tf: Any = transformers
    _train_tokenizer(out_dir)
    ids = _token_ids(out_dir)
    # The model is drawn as it was before the tool-call tokens existed, and their rows are
    # added last: every other weight stays what the seed always gave (random weights decide
    # how long the talker speaks, which benchmarks and tests rely on).
    vocab = ids["__vocab__"]
    config = tf.Qwen3OmniMoeConfig(
        **tiny_config_dict({**ids, "__vocab__": vocab - len(TOOL_TOKENS)})
    )
    torch.manual_seed(seed)
    model = tf.Qwen3OmniMoeForConditionalGeneration(config).eval()
    # transformers 5.24 leaves the talker's fused expert tensors as torch.empty (whatever was
    # in memory: not deterministic, sometimes 1e31); give every expert tensor seeded values.
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".experts." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
        model.thinker.resize_token_embeddings(vocab, mean_resizing=False)
        for matrix in (model.thinker.get_input_embeddings().weight, model.thinker.lm_head.weight):
            rows = torch.randn((len(TOOL_TOKENS), matrix.shape[1]), generator=generator) * 0.02
            matrix[vocab - len(TOOL_TOKENS) :] = rows
    config.thinker_config.text_config.vocab_size = vocab
    model.save_pretrained(str(out_dir), safe_serialization=True)
    extractor = tf.WhisperFeatureExtractor(
        feature_size=config.thinker_config.audio_config.num_mel_bins,
        sampling_rate=16000,
        return_attention_mask=True,
    )
    extractor.save_pretrained(str(out_dir))
    _write_image_processor(out_dir, config.thinker_config.vision_config)
    (out_dir / "turntaker-tiny.json").write_text(
        json.dumps({"seed": seed, "note": "random tiny weights, not a trained model"}) + "\n"
    )


def _write_image_processor(out_dir: Path, vision: Any) -> None:
    """The Qwen2-VL image processor, merged into the feature extractor's preprocessor_config.json
    (one file for both, as in Qwen's checkpoint)."""
    import transformers

    tf: Any = transformers
    # The PIL backend: the same preprocessing without torchvision (not installed here).
    images = tf.Qwen2VLImageProcessorPil(
        patch_size=vision.patch_size,
        temporal_patch_size=vision.temporal_patch_size,
        merge_size=vision.spatial_merge_size,
        min_pixels=MIN_PIXELS,
        max_pixels=MAX_PIXELS,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    path = out_dir / "preprocessor_config.json"
    merged = json.loads(path.read_text())
    merged.update(images.to_dict())
    # The class name a GPU image with torchvision resolves to the fast backend.
    merged["image_processor_type"] = "Qwen2VLImageProcessor"
    merged["processor_class"] = "Qwen3OmniMoeProcessor"
    path.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")


def make_tiny_omni(out_dir: Path, seed: int = 0) -> Path:
    """Write tiny random Qwen3-Omni weights, tokenizer and feature extractor to `out_dir`.

    Built in a sibling temporary folder and renamed into place, so that a reader (or a second
    builder racing this one) sees either nothing or a complete checkpoint. An existing `out_dir`
    is left as it is.
    """
    return build_in_place(out_dir, lambda folder: _write(folder, seed), "config.json")
