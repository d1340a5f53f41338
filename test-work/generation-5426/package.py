
import json, sys
sys.path.insert(0, sys.argv[1] + "/examples/llama3")
import torch
import generate, model as llama
from chorus.package import create_package

transformer = llama.build("debug", seed=3, vocab_size=256, max_seq_len=128).eval()
with torch.no_grad():  # attention that matters (see python/tests/test_generation.py)
    for layer in transformer.layers.values():
        layer.attention.wo.weight.mul_(8)
        layer.attention.wq.weight.mul_(8 ** 0.5)
        layer.attention.wk.weight.mul_(8 ** 0.5)
generator = generate.Llama3Generator(transformer)
create_package(sys.argv[2] + "/llama3.pt", generator, (["chorus"],), name="llama3",
               batchable=False, input_names=["text_input"], output_names=["text_output"],
               progress=False)
expected = {}
for prompt in json.load(open(sys.argv[2] + "/prompts.json")):
    tokens = generator.tokenizer.encode(prompt)
    with torch.inference_mode():
        for _ in range(12):
            tokens.append(int(transformer(torch.tensor([tokens]))[0, -1].argmax()))
    expected[prompt] = generator.tokenizer.decode(tokens[len(prompt.encode()):])
json.dump(expected, open(sys.argv[2] + "/expected.json", "w"))
