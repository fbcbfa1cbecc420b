"""A bpftune-style congestion-control learner, the baseline the closed loop is
measured against (bench/controller_lab.py). Written from the published
description of bpftune's tcp_conn_tuner (Oracle Linux), not from its code:

* one key for every connection: bpftune keys by the route's gateway, and an
  edge server reaches all its clients through one gateway;
* per connection, at close, a cost:
      (min_rtt - best min_rtt) / best min_rtt
    + (best delivery rate - delivery rate) / best delivery rate,
  where the bests are the lowest min_rtt and the highest delivery rate seen
  under the key so far;
* per arm, the cost's EWMA with alpha = 1/4;
* epsilon-greedy: the arm of lowest cost gets 1 - epsilon of new
  connections, the others share epsilon (5 %);
* no control group and no significance test.

The study applies its choice through the daemon's own sock_ops path: an
`experiment:` rule whose arm weights it rewrites (and SIGHUPs the daemon)
whenever the greedy arm changes.
"""


class BpftuneStyleLearner:
    def __init__(self, arms, epsilon_percent=5, alpha=0.25):
        if len(arms) < 2 or len(set(arms)) != len(arms):
            raise ValueError(f"arms must be 2 or more distinct congestion controls: {arms}")
        self.arms = list(arms)
        self.epsilon_percent = epsilon_percent
        self.alpha = alpha
        self.best_min_rtt_us = None
        self.best_rate_bps = None
        self.cost = {a: None for a in self.arms}   # EWMA; None until the arm's first connection
        self.closed = {a: 0 for a in self.arms}

    def observe(self, cc, min_rtt_us, delivery_rate_bps):
        """One closed connection of arm `cc`; connections without a round
        trip or a delivery-rate sample carry no cost and are skipped."""
        if cc not in self.cost or min_rtt_us <= 0 or delivery_rate_bps <= 0:
            return
        self.best_min_rtt_us = min_rtt_us if self.best_min_rtt_us is None else min(self.best_min_rtt_us,
                                                                                    min_rtt_us)
        self.best_rate_bps = delivery_rate_bps if self.best_rate_bps is None else max(self.best_rate_bps,
                                                                                     delivery_rate_bps)
        c = ((min_rtt_us - self.best_min_rtt_us) / self.best_min_rtt_us
             + (self.best_rate_bps - delivery_rate_bps) / self.best_rate_bps)
        prev = self.cost[cc]
        self.cost[cc] = c if prev is None else self.alpha * c + (1 - self.alpha) * prev
        self.closed[cc] += 1

    def greedy(self):
        """The arm of lowest cost; None until every arm has a cost (a cold
        start splits evenly)."""
        if any(v is None for v in self.cost.values()):
            return None
        return min(self.arms, key=lambda a: self.cost[a])

    def weights(self):
        """{arm: percent}, whole percents summing to 100."""
        best = self.greedy()
        n = len(self.arms)
        if best is None:
            w = {a: 100 // n for a in self.arms}
            w[self.arms[0]] += 100 - sum(w.values())
            return w
        others = [a for a in self.arms if a != best]
        w = {a: self.epsilon_percent // len(others) for a in others}
        w[best] = 100 - sum(w.values())
        return w
