"""What transformers 5.25.0 decides about a model folder, recorded for the build without transformers.

Read from the installed transformers 5.25.0 (models/auto/tokenization_auto.py and the tokenizer classes);
follows_rule.py uses it; tests/tokenize/test_follows_rule.py checks it against an installed transformers of
that version (and shows how it was read).
"""

VERSION = "5.25.0"  # read from (it keys the resolve records: follows_rule.RULE_VERSION)
# The transformers releases whose decisions were checked to equal this table (and the follows tests run);
# tests/tokenize/test_follows_rule.py fails on any other installed version until it is checked and listed.
CHECKED_IN = ("5.25.0",)  # (5.24.0 differed: camembertv2-base, llava_onevision1_5, ErgoTokenizer)

# TOKENIZER_MAPPING_NAMES: the tokenizer class registered for each config.json model_type (None: none)
MODEL_TYPES = {
    'AlbertTokenizer': "albert yoso",
    'BartTokenizer': "florence2",
    'BarthezTokenizer': "barthez",
    'BartphoTokenizer': "bartpho",
    'BertJapaneseTokenizer': "bert-japanese",
    'BertTokenizer': (
        "align bark bert blip bros chinese_clip convbert distilbert electra ernie flava git grounding-dino "
        "layoutlm megatron-bert mm-grounding-dino nezha nomic_bert qdqbert realm retribert squeezebert tvp "
        "vilt visual_bert"),
    'BertweetTokenizer': "bertweet",
    'BigBirdTokenizer': "big_bird",
    'BioGptTokenizer': "biogpt",
    'BlenderbotSmallTokenizer': "blenderbot-small",
    'BlenderbotTokenizer': "blenderbot",
    'ByT5Tokenizer': "byt5",
    'CLIPTokenizer': "aimv2 clip clipseg groupvit omdet-turbo oneformer owlv2 owlvit sam3 sam3_video xclip",
    'CTRLTokenizer': "ctrl",
    'CamembertTokenizer': "camembert",
    'CanineTokenizer': "canine",
    'ClvpTokenizer': "clvp",
    'CodeLlamaTokenizer': "code_llama",
    'CohereTokenizer': "aya_vision cohere cohere2",
    'CpmAntTokenizer': "cpmant",
    'CpmTokenizer': "cpm",
    'DPRQuestionEncoderTokenizer': "dpr",
    'DebertaTokenizer': "deberta",
    'DebertaV2Tokenizer': "deberta-v2",
    'DiaTokenizer': "dia",
    'ErgoTokenizer': "ergo",
    'EsmTokenizer': "esm",
    'EsmcTokenizer': "esmc esmfold2",
    'FNetTokenizer': "fnet",
    'FSMTTokenizer': "fsmt",
    'FlaubertTokenizer': "flaubert",
    'FunnelTokenizer': "funnel",
    'GPT2Tokenizer': (
        "blip-2 codegen dbrx emu3 gpt2 gpt_neo gptj hyperclovax_vision_v2 instructblip instructblipvideo "
        "jais2 opt phi starcoder2"),
    'GPTNeoXJapaneseTokenizer': "gpt_neox_japanese",
    'GPTNeoXTokenizer': "falcon_mamba gpt_neox mamba mamba2 mpt olmo olmoe rwkv xlstm",
    'GemmaTokenizer': (
        "diffusion_gemma gemma gemma2 gemma3 gemma3_text gemma3n gemma3n_text recurrent_gemma shieldgemma2 "
        "t5gemma zaya"),
    'HerbertTokenizer': "herbert",
    'LEDTokenizer': "led",
    'LasrTokenizer': "lasr_ctc lasr_encoder",
    'LayoutLMv2Tokenizer': "layoutlmv2",
    'LayoutLMv3Tokenizer': "layoutlmv3",
    'LayoutXLMTokenizer': "layoutxlm",
    'LlamaTokenizer': "idefics idefics2",
    'LukeTokenizer': "luke",
    'LxmertTokenizer': "lxmert",
    'MBart50Tokenizer': "mbart50",
    'MBartTokenizer': "mbart",
    'MPNetTokenizer': "mpnet",
    'MarkupLMTokenizer': "markuplm",
    'MgpstrTokenizer': "mgp-str",
    'MobileBertTokenizer': "mobilebert",
    'MvpTokenizer': "mvp",
    'MyT5Tokenizer': "myt5",
    'NllbTokenizer': "nllb nllb-moe",
    'NougatTokenizer': "nougat pp_formulanet",
    'OpenAIGPTTokenizer': "openai-gpt",
    'PLBartTokenizer': "plbart",
    'ParakeetTokenizer': (
        "granite_speech5_ctc nemotron3_5_asr nemotron_asr_streaming omniasr_ctc parakeet_ctc parakeet_rnnt "
        "parakeet_tdt"),
    'PegasusTokenizer': "pegasus",
    'PerceiverTokenizer': "perceiver",
    'PhobertTokenizer': "phobert",
    'ProphetNetTokenizer': "prophetnet",
    'Qwen2Tokenizer': (
        "audioflamingo3 colqwen2 cosmos3_omni dots3_note fun_asr_nano hunyuan_vl internvl llava_onevision1_5 "
        "moss_transcribe_diarize ovis2 qianfan_ocr qwen2 qwen2_5_omni qwen2_5_vl qwen2_audio qwen2_moe "
        "qwen2_vl qwen3 qwen3_asr qwen3_moe qwen3_next qwen3_omni_moe qwen3_vl qwen3_vl_moe"),
    'Qwen2TokenizerFast': "lighton_ocr vibevoice",
    'Qwen3_5Tokenizer': "qwen3_5 qwen3_5_moe qwen3_5_moe_text qwen3_5_text qwen4_exp",
    'RagTokenizer': "rag",
    'ReformerTokenizer': "reformer",
    'RemBertTokenizer': "rembert",
    'RoCBertTokenizer': "roc_bert",
    'RoFormerTokenizer': "roformer",
    'RobertaTokenizer': (
        "bart bridgetower clap data2vec-text ibert lilt longformer mega mra roberta roberta-prelayernorm"),
    'SeamlessM4TTokenizer': "seamless_m4t seamless_m4t_v2",
    'Siglip2Tokenizer': "siglip2",
    'SplinterTokenizer': "splinter",
    'T5Tokenizer': "mt5 musicgen musicgen_melody switch_transformers t5",
    'TapasTokenizer': "tapas",
    'TokenizersBackend': (
        "EvollaModel aria beam bigbird_pegasus canary flex_olmo glm glm4 glm4_moe glm4_moe_lite glm4v "
        "glm4v_moe glm_image glmasr got_ocr2 gpt_bigcode gradium_phonon_tts granite granitemoe "
        "granitemoehybrid granitemoeshared kimi_k25 kimi_linear kosmos-2 mimo_v2_flash minicpm_ocr "
        "minicpmv4_6 minicpmv4_7 ministral ministral3 mistral mistral3 mistral_large4 mixtral nemo_speechlm "
        "nystromformer olmo2 olmo3 olmo_hybrid omniasr pegasus_x persimmon pix2struct pixtral pocket_tts "
        "stablelm umt5 voxtral voxtral_realtime xlm-roberta-xl iquestcoder minimax_m2 llava_next modernbert "
        "phi3_v phi3 nvfp4 molmo2 opencua hyperclovax minicpm3 smolvlm ernie4_5 jamba step3_vl vipllava "
        "chatlm minicpmv ernie4_5_moe molmo cohere_asr internlm3 phimoe nemotron openvla llava paddleocr_vl "
        "fuyu modernbert-decoder arctic internlm2 h2ovl_chat hyperclovax_vlm"),
    'UdopTokenizer': "udop",
    'VideoPrismTokenizer': "videoprism",
    'VitsTokenizer': "vits",
    'Wav2Vec2CTCTokenizer': "data2vec-audio hubert unispeech unispeech-sat wav2vec2 wav2vec2-bert wav2vec2-conformer",
    'Wav2Vec2PhonemeCTCTokenizer': "wav2vec2_phoneme",
    'WhisperTokenizer': "whisper",
    'XGLMTokenizer': "xglm",
    'XLMRobertaTokenizer': "gte jina_embeddings_v3 metaclip_2 trocr xlm-roberta xmod",
    'XLMTokenizer': "xlm",
    'XLNetTokenizer': "xlnet",
    None: (
        "bert-generation fastspeech2_conformer gpt-sw3 m2m_100 marian mluke siglip speech_to_text speecht5 "
        "tipsv2"),
}
# MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS: model types whose registered class wins over the hub's
INCORRECT_HUB_CLASS = frozenset("""
arctic chatlm cohere_asr ernie4_5 ernie4_5_moe fuyu h2ovl_chat hyperclovax hyperclovax_vision_v2
hyperclovax_vlm internlm2 internlm3 iquestcoder jamba llava llava_next minicpm3 minicpmv minimax_m2 modernbert
modernbert-decoder molmo molmo2 nemotron nvfp4 opencua openvla paddleocr_vl phi3 phi3_v phimoe qwen2 qwen3_5
qwen3_5_moe qwen3_5_moe_text qwen4_exp siglip2 smolvlm step3_vl vipllava
""".split())
# MODEL_IDS_TO_TOKENIZERS_BACKEND: config._name_or_path patterns loaded as TokenizersBackend whatever the class
NAMES_AS_FILE = (
    "deepseek-ai/deepseek-r1-distill-llama-*",
    "deepseek-ai/deepseek-coder-*",
    "allenai/dolma2-tokenizer",
    "google/umt5-small",
    "naver-clova-ix/donut-*",
    "salesforce/blip2-opt-*",
    "salesforce/blip2-flan-t5-*",
    "salesforce/instructblip-flan-t5-*",
    "stepfun-ai/step-3.7-*",
)
# TokenizersBackend subclasses with an __init__ of their own ("Fast" dropped, as AutoTokenizer resolves the name):
# built from the file's vocab and merges with the class's own normalizer, pre-tokenizer, decoder and model flags
REBUILDS = frozenset("""
AlbertTokenizer BartTokenizer BarthezTokenizer BertTokenizer BigBirdTokenizer BlenderbotTokenizer CLIPTokenizer
CamembertTokenizer CodeGenTokenizer CodeLlamaTokenizer CohereTokenizer DPRContextEncoderTokenizer
DPRQuestionEncoderTokenizer DPRReaderTokenizer DebertaTokenizer DebertaV2Tokenizer DistilBertTokenizer ErgoTokenizer
EsmcTokenizer
FunnelTokenizer GPT2Tokenizer GPTNeoXTokenizer GemmaTokenizer HerbertTokenizer LEDTokenizer LasrTokenizer
LayoutLMv2Tokenizer LayoutLMv3Tokenizer LayoutXLMTokenizer LlamaTokenizer LukeTokenizer LxmertTokenizer
MBart50Tokenizer MBartTokenizer MLukeTokenizer MPNetTokenizer MarkupLMTokenizer MobileBertTokenizer MvpTokenizer
NllbTokenizer NougatTokenizer OpenAIGPTTokenizer PegasusTokenizer Qwen2Tokenizer Qwen3_5Tokenizer ReformerTokenizer
RemBertTokenizer RoFormerTokenizer RobertaTokenizer SeamlessM4TTokenizer Siglip2Tokenizer SplinterTokenizer
SqueezeBertTokenizer T5Tokenizer Tipsv2Tokenizer UdopTokenizer VideoPrismTokenizer WhisperTokenizer XGLMTokenizer
XLMRobertaTokenizer XLNetTokenizer
""".split())
# classes without a tokenizers backend (transformers runs them in Python): packer can only run the file
PYTHON = frozenset("""
AutoTokenizer BartphoTokenizer BasicTokenizer BertGenerationTokenizer BertJapaneseTokenizer BertweetTokenizer
BioGptTokenizer BlenderbotSmallTokenizer ByT5Tokenizer CTRLTokenizer CanineTokenizer CharacterTokenizer
ClvpTokenizer CpmAntTokenizer CpmTokenizer DiaTokenizer EsmTokenizer FSMTTokenizer FastSpeech2ConformerTokenizer
FlaubertTokenizer GPTNeoXJapaneseTokenizer GPTSw3Tokenizer MecabTokenizer MgpstrTokenizer MyT5Tokenizer
PLBartTokenizer PerceiverTokenizer PhobertTokenizer ProphetNetTokenizer RagTokenizer RoCBertTokenizer
SpeechT5Tokenizer TapasTokenizer VitsTokenizer Wav2Vec2CTCTokenizer Wav2Vec2PhonemeCTCTokenizer WordpieceTokenizer
XLMTokenizer
""".split())
