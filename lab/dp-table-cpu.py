#!/usr/bin/env python3
# The "Two ranks on the CPU" table of docs/accuracy.md: for each ZeRO stage, what a second rank
# changes per phase (headroom-probe --nproc 2 against --nproc 1, over Gloo) next to what the
# estimator changes. Usage: lab/dp-table-cpu.py [build dir, default build/dev]
import json, os, subprocess, sys, tempfile
B = sys.argv[1] if len(sys.argv) > 1 else "build/dev"
PROBE, CLI = B + "/probes/headroom-probe", B + "/app/headroom-cli"
TMP = tempfile.mkdtemp()
m={"activation": "silu", "head_dim": 16, "hidden_size": 64, "id": "tiny", "intermediate_size": 128, "max_position_embeddings": 512, "mlp": "gated", "model_type": "llama", "name": "tiny", "norm": "rmsnorm", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "tie_word_embeddings": False, "vocab_size": 256}
hf={"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"max_position_embeddings":512,"tie_word_embeddings":False}
open(TMP + '/m.json','w').write(json.dumps(hf))
def run(ws,z):
    c={"attention":"sdpa","finetune":"full","micro_batch":2,"seq_len":64,"optimizer":"adamw","precision":"fp32","world_size":ws,"zero_stage":z}
    open(TMP + '/q.json','w').write(json.dumps({"schema_version":1,"kind":"probe_request","model":m,"config":c,"steps":2,"device":"cpu"}))
    d=json.loads(subprocess.run([PROBE,'--request',TMP + '/q.json','--device','cpu','--nproc',str(ws)],capture_output=True,text=True).stdout.strip().split('\n')[-1])
    e=json.loads(subprocess.run([CLI,'estimate','--model',TMP + '/m.json','--precision','fp32','--batch','2','--seq','64','--gpus',str(ws),'--zero',str(z),'--json'],capture_output=True,text=True).stdout)
    e=e.get('estimate',e)
    ep={p['phase']:p['peak_allocated_bytes'] for p in e['phases']}
    mp={r['phase']:r['peak_allocated_bytes'] for r in d['ranks'][0]['phases']}
    return mp,ep,d
print("| ZeRO | phase | measured change (KiB) | estimated change (KiB) | difference, % of the rank's peak |")
print("|---|---|---|---|---|")
for z in [0,1,2,3]:
    m1,e1,_=run(1,z); m2,e2,d=run(2,z)
    for p in ['after_load','forward','backward','optimizer']:
        dm=m2[p]-m1[p]; de=e2[p]-e1[p]
        print(f"| {z} | {p} | {dm/1024:+.1f} | {de/1024:+.1f} | {(de-dm)/m2[p]*100:+.2f} |")
    print(f"<!-- z{z} spread {d['spread']:.4f} sums {[r['parameters_sum'] for r in d['ranks']]} -->")
