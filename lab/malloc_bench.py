import torch, time, json
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
out = {}
for label, n, size in [("1 GiB x 64", 64, 1 << 30), ("20 MiB x 500", 500, 20 << 20), ("2 MiB x 500", 500, 2 << 20)]:
    t = time.time()
    xs = [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(n)]
    torch.cuda.synchronize()
    dt = time.time() - t
    out[label] = {"s": round(dt, 4), "GiB_per_s": round(n * size / 2**30 / dt, 1), "ms_each": round(dt / n * 1e3, 3)}
    del xs
    torch.cuda.empty_cache()
print(json.dumps(out))
