"""FedNova (Wang et al. 2020) on PFLlib's machinery: the FedNova rows' reference.

PFLlib has no FedNova, nor has FL-bench; the local update uses the official FedNova optimizer
(JYWa/FedNova ``distoptim/FedNova.py``, unmodified, found through ``FEDNOVA_PATH``) and the
server step is its ``FedNova.average()`` (a torch.distributed all_reduce there) in one
process. Everything else (data files, DataLoader conventions, the client/server loop,
evaluation, model, aggregation weights) is PFLlib's own code (``flcore.clients.clientavg``,
``flcore.servers.serverbase``). Launched by run_pfllib.py (``-algo FedNova`` or
``FedAvgH``) in PFLlib's ``system/`` folder, with main.py's command line plus:

  -algo FedNova | FedAvgH   FedAvgH = PFLlib's FedAvg driven by this loop (the anchor: it
                            reproduces PFLlib's own FedAvg bit for bit)
  --unequal 1               client k runs 1 + k % 4 local epochs (default: -ls for all)
  --share_buffers 1         (FedAvgH, BN model) also send and n_k-average BatchNorm buffers
"""

import argparse
import copy
import os
import sys
import time

import torch
from torch import nn

SYS = os.getcwd()
sys.path.insert(0, SYS)
sys.path.append(os.environ.get("FEDNOVA_PATH", ""))  # JYWa/FedNova: distoptim, comm_helpers

from distoptim.FedNova import FedNova as FedNovaOptimizer  # noqa: E402  official, unmodified
from flcore.clients.clientavg import clientAVG  # noqa: E402
from flcore.servers.serverbase import Server  # noqa: E402
from flcore.trainmodel.models import BaseHeadSplit, FedAvgCNN  # noqa: E402

torch.manual_seed(0)  # main.py's module-level seed (run_pfllib.py makes it the run seed)

# main.py's own argparse block, read from it at run time
src = open(os.path.join(SYS, "main.py")).read()
block = src[
    src.index("    parser = argparse.ArgumentParser()") : src.index(
        "    args = parser.parse_args()"
    )
]
ns = {"argparse": argparse}
exec("\n".join(line[4:] for line in block.splitlines()), ns)
parser = ns["parser"]
parser.add_argument("--unequal", type=int, default=0)
parser.add_argument("--share_buffers", type=int, default=0)
args = parser.parse_args()
args.device = "cpu"


class clientNova(clientAVG):
    """clientAVG.train with (optionally) per-client epochs; FedNova uses the official optimizer."""

    def __init__(self, args, id, train_samples, test_samples, **kwargs):
        super().__init__(args, id, train_samples, test_samples, **kwargs)
        self.epochs = (1 + id % 4) if args.unequal else self.local_epochs
        self.use_nova = args.algorithm == "FedNova"

    def train(self):
        trainloader = self.load_train_data()
        self.model.train()
        start_time = time.time()
        if self.use_nova:
            # a fresh optimizer per round == the official one after average()
            # (momentum 0: no state is carried over)
            opt = FedNovaOptimizer(
                self.model.parameters(),
                ratio=self.ratio,
                gmf=0,
                mu=0,
                lr=self.learning_rate,
                momentum=0,
                weight_decay=0,
            )
        else:
            opt = self.optimizer  # PFLlib's SGD, exactly as clientAVG
        for _epoch in range(self.epochs):
            for x, y in trainloader:
                x = x.to(self.device)
                y = y.to(self.device)
                output = self.model(x)
                loss = self.loss(output, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        if self.use_nova:
            self.a_i = (
                opt.local_normalizing_vec
            )  # = tau_i (number of local steps) for momentum=0, mu=0
            self.tau_i = opt.local_steps
            self.cum_grad = [
                opt.state[p]["cum_grad"].clone()
                if "cum_grad" in opt.state[p]
                else torch.zeros_like(p)
                for p in self.model.parameters()
            ]  # = lr * sum of grads = x_global - x_local
        self.train_time_cost["num_rounds"] += 1
        self.train_time_cost["total_cost"] += time.time() - start_time


class NovaServer(Server):
    def __init__(self, args, times):
        super().__init__(args, times)
        self.set_slow_clients()
        self.set_clients(clientNova)
        tot = sum(c.train_samples for c in self.clients)
        for c in self.clients:
            c.ratio = c.train_samples / tot  # JYWa: DataRatios[rank] = n_k / n
        self.Budget = []
        self.tau_log = []

    def aggregate_nova(self):
        """FedNova.average() (JYWa distoptim/FedNova.py), momentum 0, mu 0, gmf 0, one process:
        tau_eff = sum_k p_k a_k ; x <- x - sum_k p_k * (tau_eff / a_k) * cum_grad_k, with p_k = the
        PFLlib upload weight n_k / sum n (== JYWa ratio when all clients join)."""
        ids = self.uploaded_ids
        ws = self.uploaded_weights
        cl = [self.clients[i] for i in ids]
        tau_eff = sum(w * c.a_i for w, c in zip(ws, cl, strict=True))
        self.tau_log.append([c.a_i for c in cl])
        new = copy.deepcopy(self.global_model)
        for k, p in enumerate(new.parameters()):
            upd = torch.zeros_like(p.data)
            for w, c in zip(ws, cl, strict=True):
                if c.a_i > 0:
                    upd += c.cum_grad[k] * (w * tau_eff / c.a_i)
            p.data = p.data - upd
        self.global_model = new

    def send_models(self):
        super().send_models()
        if self.args.share_buffers:
            gb = dict(self.global_model.named_buffers())
            for c in self.clients:
                for n, b in c.model.named_buffers():
                    b.data = gb[n].data.clone()

    def aggregate_buffers(self):
        new = dict(self.global_model.named_buffers())
        for n in new:
            acc = sum(
                w * dict(m.named_buffers())[n].data.double()
                for w, m in zip(self.uploaded_weights, self.uploaded_models, strict=True)
            )
            new[n].data = (
                acc.round().to(new[n].dtype)
                if not new[n].dtype.is_floating_point
                else acc.to(new[n].dtype)
            )

    def train(self):
        for i in range(self.global_rounds + 1):
            s_t = time.time()
            self.selected_clients = self.select_clients()
            self.send_models()
            if i % self.eval_gap == 0:
                print(f"\n-------------Round number: {i}-------------")
                print("\nEvaluate global model")
                self.evaluate()
            for client in self.selected_clients:
                client.train()
            self.receive_models()
            if self.algorithm == "FedNova":
                self.aggregate_nova()
            else:
                self.aggregate_parameters()
                if self.args.share_buffers:
                    self.aggregate_buffers()
            self.Budget.append(time.time() - s_t)
            print("-" * 25, "time cost", "-" * 25, self.Budget[-1])
        print("\nBest accuracy.")
        print(max(self.rs_test_acc))
        if self.algorithm == "FedNova":
            print("\nlocal steps a_k per round (client order of upload):", self.tau_log[0], "...")
        self.save_results()


if __name__ == "__main__":
    assert args.model == "CNN" and "MNIST" in args.dataset
    assert not args.share_buffers or args.algorithm == "FedAvgH"
    # FedAvgCNN, or FedAvgCNNBN when run_pfllib.py --model CNNBN put it in its place
    args.model = FedAvgCNN(in_features=1, num_classes=args.num_classes, dim=1024)
    # main.py's FedAvg wrapping (same parameter order, no RNG use)
    args.head = copy.deepcopy(args.model.fc)
    args.model.fc = nn.Identity()
    args.model = BaseHeadSplit(args.model, args.head)
    began = time.time()
    server = NovaServer(args, 0)
    server.train()
    print(f"\nAverage time cost: {round(time.time() - began, 2)}s.")
