//! Run-time compilation with NVRTC to CUBIN, with an on-disk cache.
//!
//! Sources are compiled for the device's own architecture (`--gpu-architecture=sm_XY`) and the
//! CUBIN (`nvrtcGetCUBIN`) is loaded, not PTX: PTX from an NVRTC newer than the driver cannot be
//! loaded, machine code for the exact architecture always can. Options: `--fmad=false` (no
//! contraction of `a * b + c`, so arithmetic rounds like the CPU kernels), IEEE division and
//! square roots (NVRTC's defaults), C++17.
//!
//! Compiled images are cached on disk under `$COTANGENT_KERNEL_CACHE`, else
//! `$XDG_CACHE_HOME/cotangent/kernels`, else `~/.cache/cotangent/kernels`, in files named by a
//! 128-bit FNV-1a hash of (source, architecture, NVRTC version): a new NVRTC or GPU never reads
//! a stale image. Cache I/O failures are ignored (the kernel is compiled instead).
use super::err;
use crate::Result;
use cudarc::nvrtc::{result as nr, sys as ns};
use std::path::PathBuf;

/// Two 64-bit FNV-1a hashes with different bases (a stable 128-bit key; `DefaultHasher` is not
/// stable across Rust releases, which a disk cache needs).
fn fnv128(parts: &[&[u8]]) -> u128 {
    let mut h1: u64 = 0xcbf2_9ce4_8422_2325;
    let mut h2: u64 = 0x6c62_272e_07bb_0142;
    for p in parts {
        for &b in p.iter().chain(&(p.len() as u64).to_le_bytes()) {
            h1 = (h1 ^ b as u64).wrapping_mul(0x100_0000_01b3);
            h2 = (h2 ^ b as u64).wrapping_mul(0x100_0000_01b3).rotate_left(5);
        }
    }
    ((h1 as u128) << 64) | h2 as u128
}

/// The NVRTC version `(major, minor)`.
pub fn version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-pointers to live integers.
    unsafe { ns::nvrtcVersion(&mut major, &mut minor) }.result().map_err(|e| err(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("COTANGENT_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("cotangent").join("kernels"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("cotangent").join("kernels"))
}

/// Compile `src` (whose kernel of interest is `name`, for error messages) to a CUBIN for compute
/// capability `arch`, reading and filling the disk cache.
pub fn compile(src: &str, name: &str, arch: (i32, i32)) -> Result<Vec<u8>> {
    let ver = version()?;
    let arch_s = format!("sm_{}{}", arch.0, arch.1);
    let key = fnv128(&[src.as_bytes(), arch_s.as_bytes(), format!("{}.{}", ver.0, ver.1).as_bytes()]);
    let file = cache_dir().map(|d| d.join(format!("{key:032x}.cubin")));
    if let Some(f) = &file {
        if let Ok(bytes) = std::fs::read(f) {
            if !bytes.is_empty() {
                return Ok(bytes);
            }
        }
    }
    let cubin = compile_uncached(src, name, &arch_s)?;
    if let Some(f) = &file {
        if let Some(dir) = f.parent() {
            let _ = std::fs::create_dir_all(dir);
            // write then rename, so a concurrent reader never sees half a file
            let tmp = f.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, &cubin).is_ok() {
                let _ = std::fs::rename(&tmp, f);
            }
        }
    }
    Ok(cubin)
}

/// Releases an NVRTC program when dropped.
struct Program(ns::nvrtcProgram);
impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `self.0` was created by `create_program` and is destroyed only here, once
        // (`Program` is neither `Clone` nor `Copy`).
        let _ = unsafe { nr::destroy_program(self.0) };
    }
}

fn compile_uncached(src: &str, name: &str, arch: &str) -> Result<Vec<u8>> {
    let csrc = std::ffi::CString::new(src).map_err(|_| err(format!("kernel {name}: source contains NUL")))?;
    let cname = std::ffi::CString::new(format!("{name}.cu")).map_err(|_| err("kernel name contains NUL"))?;
    let prog =
        Program(nr::create_program(&csrc, Some(&cname)).map_err(|e| err(format!("nvrtc: creating {name}: {e:?}")))?);
    let opts = [format!("--gpu-architecture={arch}"), "--fmad=false".into(), "--std=c++17".into()];
    // SAFETY: `prog` is a live program (dropped at the end of this function); cudarc turns the
    // options, plain ASCII without NUL, into C strings that live for the call.
    let compiled = unsafe { nr::compile_program(prog.0, &opts) };
    if let Err(e) = compiled {
        // SAFETY: `prog` is still live; cudarc sizes the log buffer from `nvrtcGetProgramLogSize`.
        let log = unsafe { nr::get_program_log(prog.0) }
            .map(|l| l.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect::<String>())
            .unwrap_or_default();
        return Err(err(format!("nvrtc failed to compile kernel {name} for {arch} ({e:?}):\n{log}")));
    }
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; `size` is a live out-pointer.
    unsafe { ns::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(|e| err(format!("nvrtc: CUBIN size of {name}: {e:?}")))?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has exactly the size NVRTC reported for this program's CUBIN, which is what
    // `nvrtcGetCUBIN` writes.
    unsafe { ns::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut std::ffi::c_char) }
        .result()
        .map_err(|e| err(format!("nvrtc: CUBIN of {name}: {e:?}")))?;
    Ok(cubin)
}

/// Whether libnvrtc can be loaded (no GPU or driver needed).
pub fn available() -> bool {
    // SAFETY: only `dlopen`s libnvrtc under cudarc's candidate names; nothing is called through it
    // here.
    unsafe { ns::is_culib_present() }
}

/// Compile `src` for `arch` without touching the cache (a test hook: checks that generated
/// sources compile wherever libnvrtc exists, even without a GPU).
#[doc(hidden)]
pub fn check_compiles(src: &str, name: &str, arch: (i32, i32)) -> Result<usize> {
    compile_uncached(src, name, &format!("sm_{}{}", arch.0, arch.1)).map(|c| c.len())
}
