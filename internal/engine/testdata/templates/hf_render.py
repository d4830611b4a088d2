# Renders the templates as Hugging Face transformers does (jinja2 sandbox,
# trim_blocks, lstrip_blocks, loopcontrols; raise_exception, strftime_now
# fixed at 2026-11-28): the expected strings of TestChatTemplateFamilies.
# Run from internal/engine: python3 testdata/templates/hf_render.py
import jinja2, json, sys, datetime
from jinja2.sandbox import ImmutableSandboxedEnvironment
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
def strftime_now(f): return datetime.datetime(2026,11,28,7,0,0).strftime(f)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False, ensure_ascii=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
conv = [{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"2+2?"}]
thought = [{"role":"user","content":"Hi"},{"role":"assistant","content":"<think>\ngreet\n</think>\n\nHello!"},{"role":"user","content":"2+2?"}]
cases = [("gemma3","<bos>","<eos>",conv,{}),("gemma3n","<bos>","<eos>",conv,{}),("mistral","<s>","</s>",conv[1:],{}),
 ("lfm2","<|startoftext|>","<|im_end|>",conv,{}),("gptoss","<|startoftext|>","<|return|>",conv,{}),("qwen3","","<|im_end|>",conv,{}),
 ("qwen3","","<|im_end|>",conv[3:],{"enable_thinking":False}),("qwen3","","<|im_end|>",thought,{}),
 ("llama3","<|begin_of_text|>","<|eot_id|>",conv,{}),("chatml","","<|im_end|>",conv,{}),("chatml","","<|im_end|>",conv,{"add_generation_prompt":False}),("qwen2","","<|im_end|>",conv[3:],{})]
for fam,bos,eos,msgs,extra in cases:
    t = env.from_string(open("testdata/templates/%s.jinja"%fam).read())
    kw = dict(messages=msgs, bos_token=bos, eos_token=eos, add_generation_prompt=True); kw.update(extra)
    print(fam, json.dumps(t.render(**kw)))
try:
    env.from_string(open("testdata/templates/mistral.jinja").read()).render(messages=conv,bos_token="<s>",eos_token="</s>",add_generation_prompt=True)
except Exception as e: print("mistral+system:", e)
