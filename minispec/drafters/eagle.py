"""EAGLE: draft in the target's own feature space, with a head restricted to frequent tokens.

EAGLE, Li et al. 2024 (arXiv 2401.15077); the reduced head, FR-Spec, Zhao et al. 2025 (arXiv 2502.14856).
Paper -> code:

    f_j            the target's top-layer feature at position j, after its final norm: what its LM
                   head reads (``Model.forward(..., on_features=...)`` hands it on). The verification pass
                   computes it anyway; the loop hands the rows its cache keeps to ``see_features``
    e_{j+1}        the target's embedding of token x_{j+1} (shared, not copied)
    f^_{j+1}       = Head(e_{j+1}, f_j) = Block(fc([e_{j+1}; f_j])): one Llama decoder layer of the
                   target's widths, with its own small KV cache (``head``). Departure: a head file may add
                   N layers after it (``layers.{i}.``, MLP width ``extra_intermediate_size``), each with its
                   own cache: f^_{j+1} = Block_N(... Block_1(Block(fc([e_{j+1}; f_j]))))
    q(x_{j+2})     = softmax(f^_{j+1} W_r) over the frequent tokens only; W_r [D, V_r] are the
                   target's LM-head columns of those tokens (``logits``). Every other token has q = 0

A round after x_0..x_n, whose true features f_0..f_{n-1} the target has given (x_n, the last token,
is not in its cache yet):

    catch up    one head pass over the entries (f_j, x_{j+1}) it has not seen; the last gives f^_n
    guess 1     x^_{n+1} ~ q(. | f^_n)
    guess i     f^_{n+i-1} = Head(e(x^_{n+i-1}), f^_{n+i-2}); x^_{n+i} ~ q(. | f^_{n+i-1}): the head's
                own prediction stands in for the feature the target has not computed
    after       the entries made from predicted features are rolled back (an integer); the next catch-up
                feeds the true features of the tokens the target kept

A tree, in the (width, depth) shape of tree.py that the cost model picks: W first tokens (the W most
likely at T = 0, sampled without replacement at T > 0), each followed by a chain of depth - 1 guesses; one
masked head pass per level. This is W fixed chains, not EAGLE-2's tree (arXiv 2406.16858), which grows
by the head's confidence and reranks its nodes.

Lossless: every guess is drawn from q, a full [V] row (zeros outside the frequent tokens) that the
drafter returns as it is; the rule of rejection.py accepts x with min(1, p(x) / q(x)) and resamples
from norm(max(0, p - q)), which needs nothing of q but that it is the distribution x was drawn from.
A token the head never proposes still comes out at its target probability through the residual.

Lower layers (EAGLE-3, Li et al. 2025, arXiv 2503.01840). Paper -> code, for a head whose file has ``w_lower``
[2D, D] and whose config.json names ``lower_layers`` [a, b] (0 <= a < b <= L - 2):

    l, m           the paper's low- and mid-level features: the outputs of the target's layers a and b (the
                   residual stream after the layer, before any norm; transformers' hidden_states[a + 1])
    h              the paper's high-level feature. Departure: here it is f_j, the top layer after the final
                   norm (EAGLE-1's input, what the LM head reads), not a layer a few below the top
    g_j            the paper's g = FC([l; m; h]) (3D -> D). Departure: here a correction to f_j,
                   g_j = f_j + [rms(l_j); rms(m_j)] W_lower, so that W_lower = 0 is the head without lower
                   layers (train_eagle_ttt.py's ``--lower-layers`` fine-tunes from one); rms is an RMS norm
                   without weights (another departure: the middle layers carry outliers in the thousands)
    a              the paper's own output fed back in place of g at later steps: f^ here, as above (a predicted
                   f^ has no l or m); g_j stands where f_j stood above, for the true entries only

The loop asks the target pass for those layers (drafters/protocol.py's ``feature_tap``), and ``see_features`` gets
[n, 3D] rows, f, l and m side by side, and keeps g.

Cheap: one layer (more only with ``layers.{i}.``) and a D x V_r head against the target's L layers and D x V head. The features cost
nothing extra; the catch-up is one small pass per round. Measurements: docs/eagle.md.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..model import Model, ModelFormatError, backend
from ..model.config import read_json
from ..model.kernel import pack
from ..model.kvcache import KVCache, common_prefix
from ..model.safetensors_io import read_safetensors
from ..model.transformer import LayerWeights, causal_mask, linear, transformer_block
from ..sampling import Stream, Warp, is_integer, top_probability
from ..tree import Tree, add_children, tree_mask_rows
from .dynamic_tree import DynamicTree, grow

TENTHS = 10  # ``context`` labels the head's confidence in tenths: 0..9


def head_shapes(cfg, extra_layers: int = 0, extra_intermediate: int | None = None) -> dict[str, tuple[int, ...]]:
    """The head's arrays as eagle.safetensors stores them: already in the layout ``x @ w`` wants ([in, out]) and
    fused like the target's layers (transformer.LayerWeights), so that loading copies nothing (with the numba kernel,
    each matrix is copied once into its rows: model/kernel.py's ``pack``). A head with layers after the first has
    theirs under ``layers.{i}.`` (i = 1..extra_layers), of MLP width ``extra_intermediate``."""
    D, F, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim

    def layer(F):  # one decoder layer's arrays
        return {"attn_norm": (D,), "w_qkv": (D, q + 2 * kv), "w_o": (q, D), "mlp_norm": (D,), "w_gate_up": (D, 2 * F),
                "w_down": (F, D)}
    extra = {f"layers.{i}.{k}": shape for i in range(1, extra_layers + 1)
             for k, shape in layer(extra_intermediate or F).items()}
    return {"w_fc": (2 * D, D), "b_fc": (D,)} | layer(F) | extra


class Eagle:
    """A feature drafter: the drafter protocol (drafters/__init__.py), plus ``see_features`` (the loop's feed) and
    ``lower_layers`` (the target layers it reads beside the top; () for none)."""

    def __init__(self, target: Model, tensors: dict[str, np.ndarray], frequent_tokens, name: str = "eagle",
                 lower_layers=(), extra_intermediate: int | None = None):
        """``tensors``: the head's arrays named and shaped as ``head_shapes`` says; ``frequent_tokens``: the ids
        the head may propose (FR-Spec); ``lower_layers``: the two target layers whose outputs ``w_lower`` reads
        (given exactly when ``tensors`` has it); ``extra_intermediate``: the MLP width of the layers after the first,
        where ``tensors`` has them (default: the target's)."""
        extra = {k.split(".")[1] for k in tensors if k.startswith("layers.")}
        if extra != {str(i) for i in range(1, len(extra) + 1)}:
            raise ModelFormatError(f"{name}: the layers after the first must be numbered layers.1.., layers.2.., ... "
                                   f"without a gap; got {sorted(extra)}")
        cfg = replace(target.cfg, num_layers=1 + len(extra))
        D = cfg.hidden_size
        shapes = head_shapes(cfg, len(extra), extra_intermediate) | ({"w_lower": (2 * D, D)} if "w_lower" in tensors
                                                                     else {})
        unknown = sorted(set(tensors) - set(shapes))
        if unknown:
            raise ModelFormatError(f"{name}: unexpected tensors {unknown}")
        for t, shape in shapes.items():
            if t not in tensors:
                raise ModelFormatError(f"{name}: missing tensor {t!r}")
            if tuple(tensors[t].shape) != shape:
                raise ModelFormatError(f"{name}: tensor {t!r} has shape {tuple(tensors[t].shape)}, expected {shape} "
                                       f"(the target's widths{'; the MLP width extra_intermediate_size' if t.startswith('layers.') else ''})")
        lower_layers = tuple(lower_layers)
        if ("w_lower" in tensors) != bool(lower_layers):
            raise ModelFormatError(f"{name}: a head with w_lower needs the two layers it reads (lower_layers), and "
                                   f"lower_layers needs w_lower; got {'w_lower' if 'w_lower' in tensors else 'no w_lower'}"
                                   f" and lower_layers {list(lower_layers)}")
        top = target.cfg.num_layers - 2  # the last layer's output is the top feature's, before its norm: not lower
        if lower_layers and not (len(lower_layers) == 2 and all(is_integer(i) for i in lower_layers)
                                 and 0 <= lower_layers[0] < lower_layers[1] <= top):
            raise ModelFormatError(f"{name}: lower_layers must be two layer indices a < b in 0..{top}, got "
                                   f"{list(lower_layers)}")
        ids = np.asarray(frequent_tokens)
        V = target.cfg.vocab_size
        if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= V \
                or np.unique(ids).size != ids.size:
            raise ModelFormatError(f"{name}: frequent tokens must be distinct token ids in 0..{V - 1}")
        dev = lambda a: backend.asarray(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731  (no copy on NumPy)
        mat = lambda a: pack(dev(a), target.kernel)  # noqa: E731  (a matrix in the layout of the target's kernel)
        self.target, self.cfg, self.name, self.vocab, self.forwards = target, cfg, name, V, 0
        self.kernel = target.kernel  # its matrices are packed for the target's kernel, and run on it
        self.w_fc, self.b_fc = mat(tensors["w_fc"]), dev(tensors["b_fc"])  # [2D, D], [D]
        self.lower_layers = tuple(int(i) for i in lower_layers)  # a, b: l and m are their outputs; () for none
        self.extra_intermediate = extra_intermediate if len(extra) else None  # the MLP width of layers.{i}. (None:
        # the target's, or no such layers)
        self.w_lower = mat(tensors["w_lower"]) if lower_layers else None  # [2D, D]: W_lower
        self.layers = [LayerWeights(attn_norm=dev(tensors[p + "attn_norm"]), w_qkv=mat(tensors[p + "w_qkv"]), b_qkv=None,
                                    w_o=mat(tensors[p + "w_o"]), mlp_norm=dev(tensors[p + "mlp_norm"]),
                                    w_gate_up=mat(tensors[p + "w_gate_up"]), w_down=mat(tensors[p + "w_down"]))
                       for p in ["", *(f"layers.{i}." for i in range(1, cfg.num_layers))]]  # EAGLE's one layer,
        # then any after it (a departure: the paper's head has one)
        self.tokens_r = np.sort(ids).astype(np.int64)  # [V_r] the frequent tokens
        self.w_r = mat(backend.xp.take(backend.xp.asarray(target.lm_head), backend.asarray(self.tokens_r), axis=1))  # [D, V_r]: W_r, a copy
        self.cache = KVCache(cfg.num_layers, cfg.num_kv_heads, 256, cfg.head_dim)  # entries j = (f_j, x_{j+1}); grows
        self.feats = backend.xp.zeros((256, cfg.hidden_size), np.float32)  # [capacity, D] the target's f_0..f_{n-1},
        # kept where the target computed them (on a GPU: never downloaded)
        self.ftokens: list[int] = []  # x_0..x_{n-1}: the tokens those features belong to
        self.htokens: list[int] = []  # x_0..x_{m}: the tokens the head's m cached entries have read
        self.f_next, self.f_at = None, -1  # f^_n: the head's output at entry f_at = n - 1, its last true entry
        self.first_row, self.first_for = None, None  # [V] the logits of f_next (``first_logits``), and that f_next
        self.first_confidence = 0.0  # their top probability (``confidence``)

    @property
    def weight_bytes(self) -> int:
        """What the head adds to the target's memory: its layers, fc and the reduced head."""
        arrays = [self.w_fc, self.b_fc, self.w_r] + [a for w in self.layers for a in vars(w).values() if a is not None] + \
            ([] if self.w_lower is None else [self.w_lower])
        return int(sum(a.nbytes for a in arrays))

    @property
    def kv_bytes_per_token(self) -> int:
        """Memory per token of context: its layers' K and V, and the target's feature it keeps (float32)."""
        return self.cfg.num_layers * 2 * self.cfg.num_kv_heads * self.cfg.head_dim * 4 + self.cfg.hidden_size * 4

    # -- the drafter protocol ------------------------------------------------------------------------
    def context(self, tokens) -> int:
        """The head's confidence in its first guess after ``tokens``, in tenths (0..9): its top probability over the
        frequent tokens at T = 1, whatever the run's warp (0 also before the target has given features: nothing to
        say). EAGLE-2 (arXiv 2406.16858) found that a head's confidence tracks the acceptance of its guess, and
        minispec's does (docs/eagle.md, "Its confidence"); a policy learns each label's acceptance under the run's own
        warp from there. Finding it is the round's catch-up and the first guess's logits, which drafting then reuses
        (``first_logits``); a plain round pays them too."""
        f = self.catch_up(tokens)
        if f is None:
            return 0
        self.first_logits(f)  # the first guess's row, once, and with it its confidence
        return min(TENTHS - 1, int(TENTHS * self.first_confidence))

    def claimed_acceptance(self, label: int) -> float:
        """What a label claims (drafters/protocol.py's ``ClaimsAcceptance``): the middle of its tenth."""
        return (label + 0.5) / TENTHS

    def room(self, tokens) -> int:
        return self.cfg.max_position_embeddings - len(tokens)

    def see_features(self, tokens, features) -> None:
        """The target has cached ``tokens``; ``features`` [n, D] (with lower layers [n, 3D]: f, l, m) are those of
        its last n, from the pass it just ran. Features of an earlier sequence that ``tokens`` does not extend are
        dropped."""
        start = len(tokens) - len(features)
        if start < 0:
            raise ValueError(f"see_features: {len(features)} feature rows for {len(tokens)} tokens")
        features = self.g(features)  # [n, D]: f, or g with lower layers
        if start > 0 and common_prefix(self.ftokens, tokens[:start]) < start:
            self.ftokens = []  # no features for the tokens before these: wait for a fresh run's prefill
            return
        if len(tokens) > len(self.feats):
            grown = backend.xp.zeros((max(2 * len(self.feats), len(tokens)), self.cfg.hidden_size), np.float32)
            grown[: len(self.feats)] = self.feats
            self.feats = grown
        self.feats[start: len(tokens)] = features
        self.ftokens = [int(t) for t in tokens]

    def propose(self, tokens, k, warp, draws, keep=None):
        """Up to k guesses, each from q over the frequent tokens; none before the target has run the prefix.
        ``keep``: the early stop of policy/auto_k.py, on the head's own top probability (as DraftModel)."""
        f = self.catch_up(tokens) if k > 0 else None
        draft_tokens, draft_probs, reach = [], [], 1.0
        if f is None:
            return [], np.zeros((0, self.vocab))
        n = len(tokens) - 1
        self.ensure_room(n + k)
        for i in range(k):
            logits = self.first_logits(f) if i == 0 else self.logits(f[None])[0]  # [V]
            if keep is not None:
                reach *= self.first_confidence if i == 0 else self.confidence(logits)
                if not keep(i + 1, reach):
                    break
            probs = warp(logits, list(tokens) + draft_tokens)  # [V], zero outside the frequent tokens
            x = draws.draw(probs, i)  # the guess, from q (keyed noise: its race at the guess's position, keyed.py)
            draft_tokens.append(x)
            draft_probs.append(probs)
            if i < k - 1:
                if keep is not None and not keep(i + 2, reach):
                    break
                # entry n+i = (f^_{n+i}, x^_{n+i+1}) at slot and position n+i -> f^_{n+i+1}: the predicted feature
                # stands in for the target's, which does not exist yet
                f = self.head([x], f[None], n + i)[0]
        self.cache.crop(n)  # forget the entries made from predicted features
        return draft_tokens, np.array(draft_probs).reshape(len(draft_tokens), self.vocab)

    def propose_tree(self, tokens, width: int, depth: int, warp, draws) -> Tree:
        """``width`` first guesses (the top W at T = 0), each followed by a chain of ``depth - 1``: one masked
        head pass per level, each node reading its parent's predicted feature. Entries rolled back after."""
        tree = Tree()
        f = self.catch_up(tokens)
        if f is None or width == 0 or depth == 0:
            return tree
        base = len(tokens) - 1  # the head's true entries: the root's is slot base - 1
        width = min(width, len(self.tokens_r))  # the top W at T = 0 must be frequent tokens, never a -inf logit
        level = add_children(tree, 0, self.first_logits(f), width, warp, draws, prefix=tokens)
        parent_f = np.repeat(f[None], len(level), axis=0)  # [W, D] the feature each level node reads
        for d in range(1, depth):  # below level 1 each node has one child, so a level's node ids are contiguous
            ids = [tree.tokens[node] for node in level]
            mask = tree_mask_rows(tree, level, base - 1)  # node n: slot base-1+n
            positions = base - 1 + tree.depths()[level]
            parent_f = self.head(ids, parent_f, self.cache.length, positions, mask)  # [W, D]
            logits = self.logits(parent_f)  # [W, V]
            level = [add_children(tree, node, logits[i], 1, warp, draws, d, tree.prefix(tokens, node))[0]
                     for i, node in enumerate(level)]
        self.cache.crop(base)
        return tree

    def grow_tree(self, tokens, shape, warp, draws) -> Tree:
        """EAGLE-2's dynamic tree of ``shape`` (a dynamic_tree.DynamicTree): each level, one masked head pass over
        the frontier, each node reading its parent's predicted feature. A node's cache slot is the order in which
        the head ran it (only frontier nodes run), not its node id. Entries rolled back after."""
        f = self.catch_up(tokens)
        if f is None:
            return Tree()
        base = len(tokens) - 1  # the head's true entries are slots 0..base-1, the root's last
        top_k = min(shape.top_k, len(self.tokens_r))  # frequent tokens only (never a -inf logit)
        depth = min(shape.depth, 1 + (self.cfg.max_position_embeddings - base) // top_k)  # each level after the first
        # writes up to top_k head slots after base (bug: near the end of the context they overflowed the head's cache)
        shape = DynamicTree(top_k, max(depth, 1), shape.nodes, shape.choose)  # ``choose``, the cost model's size, kept
        slot, out = {0: base - 1}, {0: f}  # node -> its head cache slot, and the head's output there

        def run_level(tree: Tree, frontier: list[int]) -> np.ndarray:  # -> [len(frontier), V]
            pos0 = self.cache.length
            mask = np.full((len(frontier), pos0 + len(frontier)), -np.inf, np.float32)  # [F, S]
            mask[:, :base] = 0.0  # the true context, the root's entry included
            for i, node in enumerate(frontier):
                slot[node] = pos0 + i
                mask[i, [slot[a] for a in tree.path(node)]] = 0.0  # itself and its ancestors below the root
            positions = base - 1 + tree.depths()[frontier]  # a depth-d node sits d after the root
            feats = np.stack([np.asarray(out[tree.parents[n]]) for n in frontier])  # [F, D] what each node reads
            h = self.head([tree.tokens[n] for n in frontier], feats, pos0, positions, mask)  # [F, D]
            out.update((n, h[i]) for i, n in enumerate(frontier))
            return self.logits(h)

        tree, _ = grow(tokens, self.first_logits(f), run_level, shape, warp, draws)
        self.cache.crop(base)
        return tree

    # -- the head ----------------------------------------------------------------------------------
    def head(self, ids, feats, pos0: int, positions=None, mask=None) -> np.ndarray:
        """Head(e, f) for T entries written at cache slots pos0..pos0+T-1 -> f^ [T, D] (host). Entries from pos0 on
        are forgotten first. Causal, at RoPE positions pos0.., unless a tree's ``positions`` and ``mask`` are given
        (in a tree a node's slot is not its position: siblings share a position)."""
        T = len(ids)
        self.ensure_room(pos0 + T)
        self.cache.crop(min(self.cache.length, pos0))
        if positions is None:
            positions, mask = np.arange(pos0, pos0 + T), causal_mask(pos0, T)
        pos = backend.asarray(positions)
        mask = backend.asarray(np.asarray(mask, dtype=np.float32))  # [T, S]
        x = backend.xp.concatenate([self.target.embed[backend.asarray(np.asarray(ids, np.int64))],
                                    backend.asarray(feats).astype(np.float32, copy=False)], axis=1)  # [T, 2D]: [e; f]
        x = linear(x, self.w_fc) + self.b_fc  # [T, D]
        for i, layer in enumerate(self.layers):  # EAGLE's one layer, then any after it (a departure: extra_layers)
            x = transformer_block(x, layer, self.cfg, self.cache.k[i], self.cache.v[i], pos0,
                                  self.target.cos[pos], self.target.sin[pos], mask, self.target.ops)  # [T, D]
        self.cache.length = pos0 + T
        self.forwards += 1
        return backend.to_host(x)

    def g(self, rows):  # [n, D] f, or [n, 3D] f, l, m -> [n, D]: f, or g = f + [rms(l); rms(m)] W_lower
        D = self.cfg.hidden_size
        width = D * (1 + len(self.lower_layers))
        if rows.ndim != 2 or rows.shape[1] != width:
            raise ValueError(f"{self.name}: feature rows must be [n, {width}] (the top feature"
                             f"{' then the outputs of layers ' + str(list(self.lower_layers)) if self.lower_layers else ''}"
                             f"), got {tuple(rows.shape)}")
        if self.w_lower is None:
            return rows
        xp, eps = backend.xp, self.cfg.rms_norm_eps
        x = backend.asarray(rows).astype(np.float32, copy=False)  # [n, 3D]
        lm = x[:, D:].reshape(len(x), 2, D)  # [n, 2, D]: l, m
        lm = lm / xp.sqrt((lm * lm).mean(-1, keepdims=True) + eps)  # rms(l), rms(m): no weights (a departure)
        return x[:, :D] + linear(lm.reshape(len(x), 2 * D), self.w_lower)  # [n, D]: g

    def logits(self, f) -> np.ndarray:  # [T, D] -> [T, V], -inf outside the frequent tokens
        reduced = backend.to_host(linear(backend.asarray(f).astype(np.float32, copy=False), self.w_r))  # [T, V_r]
        out = np.full((len(reduced), self.vocab), -np.inf, dtype=np.float32)  # [T, V]
        out[:, self.tokens_r] = reduced
        return out

    def first_logits(self, f) -> np.ndarray:  # f^_n [D] -> [V]: the first guess's logits, once per f^_n
        """The logits the first guess after the caught-up sequence is drawn from: computed once for ``f`` (the array
        ``catch_up`` returned; a new one whenever it runs the head again), with their ``confidence``,
        ``first_confidence``, which the label and the early stop both read. Read only: a warp works on its own copy."""
        if self.first_for is not f:
            self.first_row, self.first_for = self.logits(f[None])[0], f
            self.first_row.flags.writeable = False
            self.first_confidence = self.confidence(self.first_row)
        return self.first_row

    def confidence(self, logits) -> float:  # [V] -> the top probability at T = 1
        """The head's top probability, ``sampling.top_probability``, over the frequent tokens alone: the others' logits
        are -inf and add nothing to the softmax, and the frequent ones are a small part of the row."""
        return top_probability(logits[self.tokens_r])

    def catch_up(self, tokens):
        """Feed the entries (f_j, x_{j+1}) the head has not read -> f^_n [D], or None when the target has not
        given the features of tokens[:-1] (the first round: the prompt rides on its pass)."""
        n = len(tokens) - 1
        if n < 1 or len(self.ftokens) < n or common_prefix(self.ftokens, tokens) < n:
            return None
        # entry j read x_{j+1}: the entries still valid are those whose x_0..x_{j+1} match, j < common prefix - 1
        done = min(self.cache.length, common_prefix(self.htokens, tokens) - 1)
        if done < n or self.f_at != n - 1:  # (all n entries valid but f^_n lost: re-run entry n - 1 to recover it)
            done = max(0, min(done, n - 1))
            self.f_next = self.head(tokens[done + 1: n + 1], self.feats[done:n], done)[-1]  # the last entry's f^
            self.f_at = n - 1
        self.htokens = [int(t) for t in tokens]
        return self.f_next

    def ensure_room(self, length: int) -> None:
        self.cache = self.cache.with_room(length, self.cfg.max_position_embeddings)

    def first_guess_rows(self, tokens, start: int, warp, features=None) -> np.ndarray:  # -> [len(tokens) - start, V]
        """Row i: what the head draws its first guess after tokens[:start + i] from, teacher-forced on the target's
        ``features`` [len(tokens), D] of ``tokens`` ([len(tokens), 3D] with lower layers, as ``see_features`` takes
        them): one head pass in a cache of its own (the head's own cache is put back). The first row of a text, with no
        feature before it, is uniform over the frequent tokens."""
        if features is None or len(features) < len(tokens) or not 1 <= start <= len(tokens):
            raise ValueError(f"first_guess_rows: needs the target's features of all {len(tokens)} tokens and start "
                             f"in 1..{len(tokens)}")
        features = self.g(features)  # [len, D]
        first = np.full((1, self.vocab), -np.inf, np.float32)  # [1, V]
        first[0, self.tokens_r] = 0.0
        logits = first
        if len(tokens) >= 2:
            own, self.cache = self.cache, KVCache(self.cfg.num_layers, self.cfg.num_kv_heads, len(tokens) - 1,
                                                  self.cfg.head_dim)
            try:
                out = self.head(tokens[1:], features[: len(tokens) - 1], 0)  # [n-1, D]: f^_1 .. f^_{n-1}
            finally:
                self.cache = own
            logits = np.concatenate([first, self.logits(out)])  # [n, V]: row j guesses x_{j+1}
        return warp.chain(logits[start - 1: len(tokens) - 1], tokens[:start], tokens[start:], strict=False)  # row i after tokens[:start + i]

    # ---- cost hooks (drafters/protocol.py: TimesItself, TimesItsTreeLevels): the policy times the head with these,
    # on random tokens and features, and finds it as it was (no features, an empty cache) ----

    def forget(self) -> None:
        """Drop every feature and cache entry: the head as it was loaded (protocol.py: Forgets; a run starts so, and
        the cost hooks below leave it so)."""
        self.ftokens, self.htokens, self.f_at = [], [], -1
        self.cache.crop(0)

    def measure_costs(self, clock, repeats: int = 5, n: int = 64) -> tuple[float, float]:
        """(seconds per guess, seconds per entry caught up), greedy, on random tokens and features. Per entry: ``see_features``
        and ``catch_up`` over n of them. Per guess: a round as the loop runs one after a drafting round, over 4
        guesses, once the target has handed on one more token's features (untimed, as in the loop): the label
        (``context``) runs the head on that entry and reads the first guess's confidence, and ``propose`` drafts with an
        early stop that is asked each time and keeps every guess. The label is the first guess's work, so a plain round
        that reads it pays about one guess (policy/auto_k.py: ``label_time``)."""
        rng = Stream(np.random.PCG64(0))  # default_rng(0), a drafter's draws too
        tokens = [int(t) for t in rng.integers(0, self.vocab, n + 2)]
        feats = rng.standard_normal((n + 1, self.cfg.hidden_size * (1 + len(self.lower_layers)))).astype(np.float32)
        per_guess, per_fed = [], []
        for _ in range(repeats + 1):  # the first is a warm-up
            self.forget()
            t0 = clock()
            self.see_features(tokens[:n], feats[:n])  # a copy of the rows; with lower layers, g's product too
            self.catch_up(tokens[:n + 1])
            t1 = clock()
            self.see_features(tokens[:n + 1], feats[n:])  # one more token's features: untimed, as in the loop
            t2 = clock()
            self.context(tokens)  # the round: its label, then 4 guesses
            self.propose(tokens, 4, Warp(0.0), rng, keep=lambda j, reach: True)
            t3 = clock()
            per_fed.append((t1 - t0) / n)
            per_guess.append((t3 - t2) / 4)
        self.forget()
        return float(np.median(per_guess[1:])), float(np.median(per_fed[1:]))

    def level_times(self, clock, widths, repeats: int = 5, n: int = 64) -> dict[int, float]:
        """Seconds of one tree level of w nodes: a head pass over w entries and their reduced logits, after n."""
        rng = np.random.default_rng(0)
        self.ensure_room(n + max(widths))
        self.head(rng.integers(0, self.vocab, n), rng.standard_normal((n, self.cfg.hidden_size)), 0)
        times = {w: [] for w in widths}
        for _ in range(repeats + 1):
            for w in widths:
                t0 = clock()
                self.logits(self.head(rng.integers(0, self.vocab, w), rng.standard_normal((w, self.cfg.hidden_size)), n))
                times[w].append(clock() - t0)
        self.forget()
        return {w: float(np.median(t[1:])) for w, t in times.items()}


def is_eagle_dir(path) -> bool:
    f = Path(path) / "config.json"
    try:
        return f.is_file() and json.loads(f.read_text()).get("minispec_drafter") == "eagle"
    except (OSError, ValueError, AttributeError):
        return False


def load_eagle(path, target: Model) -> Eagle:
    """An EAGLE head directory: config.json ("minispec_drafter": "eagle" and the target's widths; "lower_layers" for
    a head that reads them; "extra_layers" and "extra_intermediate_size" for one with layers after the first),
    eagle.safetensors (``head_shapes``, and ``w_lower``) and frequent_tokens.json (a list of
    token ids)."""
    path = Path(path)
    cfg = read_json(path / "config.json")
    for key, want in (("hidden_size", target.cfg.hidden_size), ("num_attention_heads", target.cfg.num_heads),
                      ("num_key_value_heads", target.cfg.num_kv_heads), ("head_dim", target.cfg.head_dim),
                      ("intermediate_size", target.cfg.intermediate_size), ("target_vocab_size", target.cfg.vocab_size)):
        if cfg.get(key) != want:
            raise ModelFormatError(f"{path / 'config.json'}: {key} is {cfg.get(key)!r}, but the target has {want}: "
                                   "this head was trained for another target")
    tokens = read_json(path / "frequent_tokens.json", expect=list)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise ModelFormatError(f"{path / 'frequent_tokens.json'}: expected a list of integer token ids")
    if cfg.get("reduced_vocab_size") != len(tokens):
        raise ModelFormatError(f"{path / 'config.json'}: reduced_vocab_size is {cfg.get('reduced_vocab_size')!r}, but "
                               f"frequent_tokens.json lists {len(tokens)} tokens")
    tensors = read_safetensors(path / "eagle.safetensors")
    for t, a in tensors.items():
        if not np.all(np.isfinite(a)):
            raise ModelFormatError(f"{path / 'eagle.safetensors'}: tensor {t!r} has non-finite values")
    lower = cfg.get("lower_layers", [])
    if not isinstance(lower, list):
        raise ModelFormatError(f"{path / 'config.json'}: lower_layers must be a list of two layer indices, got {lower!r}")
    extra, width = cfg.get("extra_layers", 0), cfg.get("extra_intermediate_size")
    stored = len({t.split(".")[1] for t in tensors if t.startswith("layers.")})
    if not is_integer(extra) or extra != stored or (is_integer(width) and width >= 1) != bool(extra):
        raise ModelFormatError(f"{path / 'config.json'}: extra_layers is {extra!r} and extra_intermediate_size "
                               f"{width!r}, but eagle.safetensors has {stored} layers after the first (each needs a "
                               "positive integer width)")
    return Eagle(target, tensors, tokens, name=f"eagle:{path.name}", lower_layers=lower,
                 extra_intermediate=width if extra else None)
