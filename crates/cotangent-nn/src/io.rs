//! Saving and loading parameter trees as [safetensors](https://github.com/huggingface/safetensors)
//! files (`f32`, `f64`, `f16`, `bf16`, and the integer dtypes).
//!
//! Tensor names are the dotted leaf names of the tree. The tree's leaf order is stored in the
//! file's metadata (`cotangent.order`) so [`load`] rebuilds the same order.
use crate::{Module, Tree};
use cotangent::{Array, DType, Error, Result};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

const ORDER_KEY: &str = "cotangent.order";

fn st_dtype(d: DType) -> Result<Dtype> {
    Ok(match d {
        DType::Bool => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::U32 => Dtype::U32,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    })
}

fn ct_dtype(d: Dtype, name: &str) -> Result<DType> {
    Ok(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::U8,
        Dtype::U32 => DType::U32,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        other => return Err(Error::Io(format!("safetensors: tensor `{name}` has unsupported dtype {other:?}"))),
    })
}

fn to_bytes(a: &Array) -> Result<Vec<u8>> {
    macro_rules! le {
        ($t:ty) => {
            a.to_vec::<$t>()?.iter().flat_map(|x| x.to_le_bytes()).collect()
        };
    }
    Ok(match a.dtype() {
        DType::Bool => a.to_vec::<bool>()?.iter().map(|&b| b as u8).collect(),
        DType::U8 => a.to_vec::<u8>()?,
        DType::U32 => le!(u32),
        DType::I32 => le!(i32),
        DType::I64 => le!(i64),
        DType::F16 => le!(half::f16),
        DType::BF16 => le!(half::bf16),
        DType::F32 => le!(f32),
        DType::F64 => le!(f64),
    })
}

fn from_bytes(bytes: &[u8], shape: &[usize], dtype: DType) -> Array {
    macro_rules! le {
        ($t:ty, $n:expr) => {
            Array::from_vec(
                bytes.chunks_exact($n).map(|c| <$t>::from_le_bytes(c.try_into().unwrap())).collect::<Vec<$t>>(),
                shape,
            )
        };
    }
    match dtype {
        DType::Bool => Array::from_vec(bytes.iter().map(|&b| b != 0).collect::<Vec<bool>>(), shape),
        DType::U8 => Array::from_vec(bytes.to_vec(), shape),
        DType::U32 => le!(u32, 4),
        DType::I32 => le!(i32, 4),
        DType::I64 => le!(i64, 8),
        DType::F16 => le!(half::f16, 2),
        DType::BF16 => le!(half::bf16, 2),
        DType::F32 => le!(f32, 4),
        DType::F64 => le!(f64, 8),
    }
}

/// Serialize `tree` to safetensors bytes; float leaves are converted to `float_dtype` if given
/// (e.g. `Some(DType::BF16)` to halve a checkpoint).
pub fn to_safetensors_bytes(tree: &Tree, float_dtype: Option<DType>) -> Result<Vec<u8>> {
    let flat = tree.flatten();
    let mut owned = Vec::with_capacity(flat.len());
    for (name, a) in &flat {
        let a = match float_dtype {
            Some(d) if a.dtype().is_float() => a.astype(d),
            _ => a.clone(),
        };
        owned.push((name.clone(), st_dtype(a.dtype())?, a.shape().to_vec(), to_bytes(&a)?));
    }
    let views = owned
        .iter()
        .map(|(n, d, s, b)| {
            safetensors::tensor::TensorView::new(*d, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::Io(format!("safetensors: tensor `{n}`: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let order = flat.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join("\n");
    let meta = HashMap::from([(ORDER_KEY.to_string(), order)]);
    safetensors::serialize(views, Some(meta)).map_err(|e| Error::Io(format!("safetensors: {e}")))
}

/// Write `tree` to a safetensors file (see [`to_safetensors_bytes`]).
pub fn save(path: impl AsRef<Path>, tree: &Tree, float_dtype: Option<DType>) -> Result<()> {
    let bytes = to_safetensors_bytes(tree, float_dtype)?;
    std::fs::write(path.as_ref(), bytes).map_err(|e| Error::Io(format!("writing {}: {e}", path.as_ref().display())))
}

/// Parse safetensors bytes into a tree. A truncated or malformed buffer is an `Err` that says
/// what is wrong.
pub fn from_safetensors_bytes(bytes: &[u8]) -> Result<Tree> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| Error::Io(format!("malformed safetensors data: {e}")))?;
    let (_, meta) =
        SafeTensors::read_metadata(bytes).map_err(|e| Error::Io(format!("malformed safetensors data: {e}")))?;
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    if let Some(order) = meta.metadata().as_ref().and_then(|m| m.get(ORDER_KEY)) {
        let stored: Vec<String> = order.split('\n').filter(|s| !s.is_empty()).map(String::from).collect();
        let mut a = stored.clone();
        a.sort();
        if a == names {
            names = stored;
        }
    }
    let mut items = Vec::with_capacity(names.len());
    for name in names {
        let view = st.tensor(&name).map_err(|e| Error::Io(format!("safetensors: tensor `{name}`: {e}")))?;
        let dtype = ct_dtype(view.dtype(), &name)?;
        items.push((name, from_bytes(view.data(), view.shape(), dtype)));
    }
    Tree::unflatten(items)
}

/// Read a safetensors file into a tree.
pub fn load(path: impl AsRef<Path>) -> Result<Tree> {
    let p = path.as_ref();
    let bytes = std::fs::read(p).map_err(|e| Error::Io(format!("reading {}: {e}", p.display())))?;
    from_safetensors_bytes(&bytes).map_err(|e| match e {
        Error::Io(m) => Error::Io(format!("{}: {m}", p.display())),
        e => e,
    })
}

/// Load a checkpoint into `model`: every parameter of `model.parameters()` must be in the file
/// with the same shape (it is converted to the parameter's dtype). A missing tensor, a shape
/// mismatch or an extra tensor is an `Err` that names it.
pub fn load_into<M: Module>(model: &mut M, path: impl AsRef<Path>) -> Result<()> {
    let loaded = load(path.as_ref())?;
    let mut found: HashMap<String, Array> = loaded.flatten().into_iter().collect();
    let params = model.parameters();
    let mut new = Vec::new();
    for (name, p) in params.flatten() {
        let a = found.remove(&name).ok_or_else(|| {
            Error::Io(format!("{}: missing tensor `{name}` (shape {:?})", path.as_ref().display(), p.shape()))
        })?;
        if a.shape() != p.shape() {
            return Err(Error::Shape(format!(
                "{}: tensor `{name}` has shape {:?} but the model expects {:?}",
                path.as_ref().display(),
                a.shape(),
                p.shape()
            )));
        }
        new.push(a.astype(p.dtype()));
    }
    if let Some(extra) = found.keys().min() {
        return Err(Error::Io(format!(
            "{}: tensor `{extra}` is not a parameter of the model",
            path.as_ref().display()
        )));
    }
    cotangent::eval(&new)?;
    model.update(&params.with_leaves(new)?)
}
