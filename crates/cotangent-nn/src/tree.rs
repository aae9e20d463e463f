//! Parameter trees: nested, named collections of arrays.
//!
//! A model's parameters, its gradients and an optimizer's state are all [`Tree`]s of the same
//! shape. Leaves are named by the path to them, joined with dots:
//! `"layers.0.attn.q_proj.weight"`.
//!
//! ```
//! use cotangent::Array;
//! use cotangent_nn::Tree;
//! let t = Tree::dict([
//!     ("weight", Tree::leaf(Array::from_slice(&[1.0f32, 2.0], &[2]))),
//!     ("layers", Tree::list([Tree::leaf(Array::scalar(3.0f32))])),
//! ]);
//! let names: Vec<String> = t.flatten().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["weight", "layers.0"]);
//! let doubled = t.map(|_, a| a * 2.0);
//! assert_eq!(doubled.get("layers.0").unwrap().item::<f32>().unwrap(), 6.0);
//! ```
//!
//! A `Tree` is a [`cotangent::ArrayTree`], so cotangent's tree-aware transforms take it
//! directly and return gradients as a tree of the same names:
//!
//! ```
//! use cotangent::{self as ct, Array};
//! use cotangent_nn::Tree;
//! let params = Tree::dict([("w", Tree::leaf(Array::from_slice(&[1.0f64, 2.0], &[2])))]);
//! let loss = |p: &Tree, x: &Array| Ok::<_, ct::Error>((p.require("w")? * x).sum_all().square());
//! let grads = ct::grad_tree(loss)(&params, &Array::from_slice(&[3.0f64, 1.0], &[2]))?;
//! assert_eq!(grads.require("w")?.to_vec::<f64>()?, vec![30.0, 10.0]); // 2 (w·x) x
//! # Ok::<(), ct::Error>(())
//! ```
use cotangent::{Array, ArrayTree, Error, Result};

/// A nested collection of arrays: a leaf, a dictionary with string keys (insertion order kept)
/// or a list.
#[derive(Clone, Debug)]
pub enum Tree {
    /// One array.
    Leaf(Array),
    /// Named children, in insertion order.
    Dict(Vec<(String, Tree)>),
    /// Numbered children (named `0`, `1`, ... in paths).
    List(Vec<Tree>),
}

impl Default for Tree {
    fn default() -> Self {
        Tree::Dict(Vec::new())
    }
}

impl Tree {
    /// A leaf holding `a`.
    pub fn leaf(a: Array) -> Tree {
        Tree::Leaf(a)
    }

    /// A dictionary from `(key, child)` pairs.
    pub fn dict<K: Into<String>>(items: impl IntoIterator<Item = (K, Tree)>) -> Tree {
        Tree::Dict(items.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// A list of children.
    pub fn list(items: impl IntoIterator<Item = Tree>) -> Tree {
        Tree::List(items.into_iter().collect())
    }

    /// An empty dictionary.
    pub fn empty() -> Tree {
        Tree::Dict(Vec::new())
    }

    /// Add `child` under `key` (a dictionary only; replaces an existing key). Returns `self` so
    /// calls chain. Panics if `self` is not a dictionary.
    pub fn with(mut self, key: &str, child: Tree) -> Tree {
        match &mut self {
            Tree::Dict(items) => {
                if let Some(slot) = items.iter_mut().find(|(k, _)| k == key) {
                    slot.1 = child;
                } else {
                    items.push((key.to_string(), child));
                }
            }
            _ => panic!("cotangent_nn::Tree::with: `{key}` can only be added to a dictionary"),
        }
        self
    }

    /// Number of leaves.
    pub fn len(&self) -> usize {
        match self {
            Tree::Leaf(_) => 1,
            Tree::Dict(items) => items.iter().map(|(_, t)| t.len()).sum(),
            Tree::List(items) => items.iter().map(Tree::len).sum(),
        }
    }

    /// Whether the tree has no leaves.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The array of a leaf, `None` for dictionaries and lists.
    pub fn as_leaf(&self) -> Option<&Array> {
        match self {
            Tree::Leaf(a) => Some(a),
            _ => None,
        }
    }

    /// The direct child named `key` (a dictionary key, or a list index written in decimal).
    pub fn child(&self, key: &str) -> Option<&Tree> {
        match self {
            Tree::Leaf(_) => None,
            Tree::Dict(items) => items.iter().find(|(k, _)| k == key).map(|(_, t)| t),
            Tree::List(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        }
    }

    /// The subtree at a dotted path (`"layers.0.weight"`); the empty path is `self`.
    pub fn subtree(&self, path: &str) -> Option<&Tree> {
        if path.is_empty() {
            return Some(self);
        }
        path.split('.').try_fold(self, |t, k| t.child(k))
    }

    /// The leaf array at a dotted path.
    pub fn get(&self, path: &str) -> Option<&Array> {
        self.subtree(path).and_then(Tree::as_leaf)
    }

    /// The leaf array at a dotted path, or an error naming the path.
    pub fn require(&self, path: &str) -> Result<&Array> {
        self.get(path).ok_or_else(|| Error::Other(format!("parameter tree: no array at `{path}`")))
    }

    /// Every leaf with its dotted name, in tree order (dictionary insertion order, list order).
    pub fn flatten(&self) -> Vec<(String, Array)> {
        let mut out = Vec::with_capacity(self.len());
        self.visit("", &mut |name, a| out.push((name.to_string(), a.clone())));
        out
    }

    /// The leaves in tree order, without names.
    pub fn leaves(&self) -> Vec<Array> {
        let mut out = Vec::with_capacity(self.len());
        self.visit("", &mut |_, a| out.push(a.clone()));
        out
    }

    /// The dotted names of the leaves, in tree order.
    pub fn names(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.len());
        self.visit("", &mut |n, _| out.push(n.to_string()));
        out
    }

    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Array)) {
        let join = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
        match self {
            Tree::Leaf(a) => f(prefix, a),
            Tree::Dict(items) => items.iter().for_each(|(k, t)| t.visit(&join(k), f)),
            Tree::List(items) => items.iter().enumerate().for_each(|(i, t)| t.visit(&join(&i.to_string()), f)),
        }
    }

    /// A tree of the same structure with the leaves replaced, in tree order, by `leaves`.
    /// Errs if the count differs.
    pub fn with_leaves(&self, leaves: Vec<Array>) -> Result<Tree> {
        if leaves.len() != self.len() {
            return Err(Error::Other(format!(
                "parameter tree: {} arrays given for a tree of {} leaves",
                leaves.len(),
                self.len()
            )));
        }
        let mut it = leaves.into_iter();
        Ok(self.map(|_, _| it.next().expect("counted above")))
    }

    /// Build a tree from dotted names: `"a.0.b"` creates dictionary `a` whose child `0`...;
    /// a dictionary whose keys are exactly `0..n` becomes a list. Errs on a name that is both
    /// a leaf and a prefix of another, or a repeated name.
    pub fn unflatten(items: impl IntoIterator<Item = (String, Array)>) -> Result<Tree> {
        enum Build {
            Leaf(Array),
            Node(Vec<(String, Build)>),
        }
        fn insert(node: &mut Vec<(String, Build)>, path: &[&str], a: Array, full: &str) -> Result<()> {
            let clash = || Error::Other(format!("parameter tree: `{full}` clashes with another name"));
            let pos = node.iter().position(|(k, _)| k == path[0]);
            if path.len() == 1 {
                if pos.is_some() {
                    return Err(clash());
                }
                node.push((path[0].to_string(), Build::Leaf(a)));
                return Ok(());
            }
            let idx = match pos {
                Some(i) => i,
                None => {
                    node.push((path[0].to_string(), Build::Node(Vec::new())));
                    node.len() - 1
                }
            };
            match &mut node[idx].1 {
                Build::Node(children) => insert(children, &path[1..], a, full),
                Build::Leaf(_) => Err(clash()),
            }
        }
        fn finish(b: Build) -> Tree {
            match b {
                Build::Leaf(a) => Tree::Leaf(a),
                Build::Node(children) => {
                    let mut idx: Vec<Option<usize>> = children.iter().map(|(k, _)| k.parse::<usize>().ok()).collect();
                    let is_list = !children.is_empty() && idx.iter().all(Option::is_some) && {
                        let mut sorted: Vec<usize> = idx.iter().map(|i| i.unwrap()).collect();
                        sorted.sort_unstable();
                        sorted.iter().enumerate().all(|(i, &k)| i == k)
                    };
                    if is_list {
                        let mut slots: Vec<Option<Tree>> = (0..children.len()).map(|_| None).collect();
                        for ((_, c), i) in children.into_iter().zip(idx.iter_mut()) {
                            slots[i.take().unwrap()] = Some(finish(c));
                        }
                        Tree::List(slots.into_iter().map(Option::unwrap).collect())
                    } else {
                        Tree::Dict(children.into_iter().map(|(k, c)| (k, finish(c))).collect())
                    }
                }
            }
        }
        let mut root = Vec::new();
        for (name, a) in items {
            if name.is_empty() {
                return Err(Error::Other("parameter tree: empty name".into()));
            }
            let path: Vec<&str> = name.split('.').collect();
            insert(&mut root, &path, a, &name)?;
        }
        Ok(finish(Build::Node(root)))
    }

    /// A tree of the same structure with `f(name, leaf)` at every leaf.
    pub fn map(&self, mut f: impl FnMut(&str, &Array) -> Array) -> Tree {
        self.map_inner("", &mut f)
    }

    fn map_inner(&self, prefix: &str, f: &mut dyn FnMut(&str, &Array) -> Array) -> Tree {
        let join = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
        match self {
            Tree::Leaf(a) => Tree::Leaf(f(prefix, a)),
            Tree::Dict(items) => Tree::Dict(items.iter().map(|(k, t)| (k.clone(), t.map_inner(&join(k), f))).collect()),
            Tree::List(items) => {
                Tree::List(items.iter().enumerate().map(|(i, t)| t.map_inner(&join(&i.to_string()), f)).collect())
            }
        }
    }

    /// Combine two trees of the same structure leaf by leaf: `f(name, a, b)`. Errs, naming the
    /// place, if the structures differ.
    pub fn zip(&self, other: &Tree, mut f: impl FnMut(&str, &Array, &Array) -> Array) -> Result<Tree> {
        self.zip_inner(other, "", &mut f)
    }

    fn zip_inner(&self, other: &Tree, prefix: &str, f: &mut dyn FnMut(&str, &Array, &Array) -> Array) -> Result<Tree> {
        let join = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
        let differ = |what: &str| {
            Error::Other(format!(
                "parameter trees differ at `{}`: {what}",
                if prefix.is_empty() { "<root>" } else { prefix }
            ))
        };
        match (self, other) {
            (Tree::Leaf(a), Tree::Leaf(b)) => Ok(Tree::Leaf(f(prefix, a, b))),
            (Tree::Dict(x), Tree::Dict(y)) => {
                if x.len() != y.len() {
                    return Err(differ(&format!("{} keys vs {} keys", x.len(), y.len())));
                }
                x.iter()
                    .map(|(k, t)| {
                        let u =
                            other.child(k).ok_or_else(|| differ(&format!("key `{k}` missing in the second tree")))?;
                        Ok((k.clone(), t.zip_inner(u, &join(k), f)?))
                    })
                    .collect::<Result<_>>()
                    .map(Tree::Dict)
            }
            (Tree::List(x), Tree::List(y)) => {
                if x.len() != y.len() {
                    return Err(differ(&format!("lists of {} and {} items", x.len(), y.len())));
                }
                x.iter()
                    .zip(y)
                    .enumerate()
                    .map(|(i, (t, u))| t.zip_inner(u, &join(&i.to_string()), f))
                    .collect::<Result<_>>()
                    .map(Tree::List)
            }
            _ => Err(differ("a leaf, a dictionary and a list do not match")),
        }
    }

    /// The leaves whose names satisfy `keep`, as a tree (empty dictionaries and lists that
    /// result are dropped; list positions keep their original numbers as dictionary keys
    /// when items are removed from the middle).
    pub fn filter(&self, mut keep: impl FnMut(&str) -> bool) -> Tree {
        let kept: Vec<(String, Array)> = self.flatten().into_iter().filter(|(n, _)| keep(n)).collect();
        if let [(n, a)] = kept.as_slice() {
            if n.is_empty() {
                return Tree::Leaf(a.clone());
            }
        }
        Tree::unflatten(kept).expect("names from a valid tree")
    }

    /// Leaves of `self` replaced by the leaves of `other` with the same name (other names of
    /// `other` are an error). Used to apply a partial update (e.g. only the trainable
    /// parameters) to a full tree.
    pub fn merge(&self, other: &Tree) -> Result<Tree> {
        let mut updates: std::collections::HashMap<String, Array> = other.flatten().into_iter().collect();
        let out = self.map(|n, a| updates.remove(n).unwrap_or_else(|| a.clone()));
        if let Some(name) = updates.keys().next() {
            return Err(Error::Other(format!("parameter tree: update names `{name}`, which the tree does not have")));
        }
        Ok(out)
    }

    /// Total number of scalar values in the leaves.
    pub fn num_elements(&self) -> usize {
        self.leaves().iter().map(Array::size).sum()
    }

    /// Evaluate every leaf.
    pub fn eval(&self) -> Result<()> {
        cotangent::eval(&self.leaves())
    }
}

/// Leaves in tree order (dictionary insertion order, list order), as [`Tree::leaves`]; a
/// rebuilt tree keeps every name.
impl ArrayTree for Tree {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        self.visit("", &mut |_, a| leaves.push(a.clone()));
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        Ok(match self {
            Tree::Leaf(a) => Tree::Leaf(a.rebuild(leaves)?),
            Tree::Dict(items) => {
                Tree::Dict(items.iter().map(|(k, t)| Ok((k.clone(), t.rebuild(leaves)?))).collect::<Result<_>>()?)
            }
            Tree::List(items) => Tree::List(items.iter().map(|t| t.rebuild(leaves)).collect::<Result<_>>()?),
        })
    }
}
