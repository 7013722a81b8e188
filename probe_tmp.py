from fleets.catalog_io import load_catalog
from fleets.placement import place_pool
from sim.models.perf import PerfModel
c=load_catalog()
for acc,model,tp,ep,prec in [("h200","deepseek-v3",8,1,"fp8"),("gb200","deepseek-v3",8,1,"fp8"),("gb200","deepseek-v3",1,8,"fp8"),("gb200","deepseek-v3",1,32,"fp8"),("gb200","deepseek-v3",1,64,"fp8"),("gb200","deepseek-v3",4,64,"fp8"),
                              ("h200","mixtral-8x7b",8,1,"fp8"),("gb200","mixtral-8x7b",1,8,"fp8"),("gb200","mixtral-8x7b",2,8,"fp8")]:
    a=c.accelerator(acc); m=c.model(model)
    try:
        lay=place_pool(name="p",accelerator=a,model=m,precision=prec,tp=tp,pp=1,replicas=1,ep=ep)
    except Exception as e:
        print(acc,model,tp,ep,"ERR",e); continue
    p=PerfModel(a,m,prec,tp,1,ep=ep)
    kv_tok=lay.replica_free_bytes/p.kv_bytes_per_token
    for B in (1,64,256):
        C=B*2000
        t=p.decode_time_s(B,C)
        print(f"{acc:6} {model:13} tp{tp} ep{ep}: B={B:4d} ctx2k step {t*1e3:7.2f} ms  tok/s/user {1/t:7.1f} tok/s/gpu {B/t/lay.accelerators:8.1f}  w/gpu {m.weight_bytes_per_accelerator(prec,tp,ep)/1e9:6.1f} GB  KV cap {kv_tok/1e6:.2f} Mtok")
