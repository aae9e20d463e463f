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
//! a stale image. A cache file holds a header (magic, payload length, 128-bit FNV-1a hash of
//! the payload) and the CUBIN; a file that is short, altered or not a whole 64-bit ELF image
//! (its program and section header tables inside the file) is ignored and overwritten, so the
//! driver, which takes the image without a length, never reads past it. Cache I/O failures are
//! ignored (the kernel is compiled instead).
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
        if let Some(cubin) = std::fs::read(f).ok().and_then(cache_payload) {
            return Ok(cubin);
        }
    }
    let cubin = compile_uncached(src, name, &arch_s)?;
    if !is_whole_elf64(&cubin) {
        return Err(err(format!("kernel {name}: NVRTC returned an image that is not a whole 64-bit ELF file")));
    }
    if let Some(f) = &file {
        if let Some(dir) = f.parent() {
            let _ = std::fs::create_dir_all(dir);
            // write then rename, so a concurrent reader never sees half a file
            let tmp = f.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, cache_file(&cubin)).is_ok() {
                let _ = std::fs::rename(&tmp, f);
            }
        }
    }
    Ok(cubin)
}

/// First bytes of a cache file (the format's version is its last byte).
const CACHE_MAGIC: &[u8; 8] = b"ctcubin1";
/// Cache header: magic, payload length (u64, little-endian), FNV-1a-128 of the payload.
const CACHE_HEADER: usize = 8 + 8 + 16;

/// A cache file for `cubin`: header, then the image.
fn cache_file(cubin: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(CACHE_HEADER + cubin.len());
    f.extend_from_slice(CACHE_MAGIC);
    f.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    f.extend_from_slice(&fnv128(&[cubin]).to_le_bytes());
    f.extend_from_slice(cubin);
    f
}

/// The image in a cache file, if the header's magic, length and hash match it and it is a
/// whole 64-bit ELF file; `None` for anything else (the kernel is then compiled again).
fn cache_payload(mut file: Vec<u8>) -> Option<Vec<u8>> {
    let header = file.get(..CACHE_HEADER)?;
    let len = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let hash = u128::from_le_bytes(header[16..32].try_into().ok()?);
    let payload = &file[CACHE_HEADER..];
    if &header[..8] != CACHE_MAGIC || len != payload.len() as u64 || fnv128(&[payload]) != hash {
        return None;
    }
    if !is_whole_elf64(payload) {
        return None;
    }
    file.drain(..CACHE_HEADER);
    Some(file)
}

/// Whether `image` is a little-endian 64-bit ELF file that lies wholly inside the slice: its
/// program and section header tables, every segment's file bytes and every section's bytes
/// (the extent `cuModuleLoadData`, which takes no length, reads an image to).
fn is_whole_elf64(image: &[u8]) -> bool {
    const EHDR: usize = 64;
    if image.len() < EHDR || &image[..4] != b"\x7fELF" || image[4] != 2 || image[5] != 1 {
        return false;
    }
    let len = image.len() as u64;
    let u16_at = |o: usize| u16::from_le_bytes([image[o], image[o + 1]]) as u64;
    let u32_at = |o: usize| u32::from_le_bytes(image[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(image[o..o + 8].try_into().expect("8 bytes"));
    let inside =
        |offset: u64, bytes: Option<u64>| bytes.and_then(|b| b.checked_add(offset)).is_some_and(|end| end <= len);
    // (table offset, entry count, entry size, the entry's offset and size fields, minimum entry)
    let tables = [
        (u64_at(0x20), u16_at(0x38), u16_at(0x36), 0x08, 0x20, 0x38, None),
        (u64_at(0x28), u16_at(0x3c), u16_at(0x3a), 0x18, 0x20, 0x40, Some(8)), // skip SHT_NOBITS
    ];
    for (table, count, entry, off_field, size_field, min_entry, nobits) in tables {
        if count == 0 {
            continue;
        }
        if entry < min_entry || !inside(table, count.checked_mul(entry)) {
            return false;
        }
        for i in 0..count {
            let e = (table + i * entry) as usize;
            if nobits.is_some_and(|t| u32_at(e + 4) == t) {
                continue;
            }
            if !inside(u64_at(e + off_field), Some(u64_at(e + size_field))) {
                return false;
            }
        }
    }
    true
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A small 64-bit ELF image: header, one program header, two section headers (one NOBITS),
    /// and `body` bytes that the first section covers.
    fn elf(body: &[u8]) -> Vec<u8> {
        let (ph, sh) = (64u64, 64 + 56u64);
        let data = sh + 2 * 64;
        let mut f = vec![0u8; data as usize];
        f[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        f[0x20..0x28].copy_from_slice(&ph.to_le_bytes());
        f[0x28..0x30].copy_from_slice(&sh.to_le_bytes());
        for (o, v) in [(0x36, 56u16), (0x38, 1), (0x3a, 64), (0x3c, 2)] {
            f[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
        let put = |f: &mut Vec<u8>, at: u64, v: u64| f[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
        put(&mut f, ph + 0x08, data);
        put(&mut f, ph + 0x20, body.len() as u64);
        put(&mut f, sh + 0x18, data);
        put(&mut f, sh + 0x20, body.len() as u64);
        f[(sh + 64 + 4) as usize] = 8; // SHT_NOBITS: its size is not in the file
        put(&mut f, sh + 64 + 0x18, data);
        put(&mut f, sh + 64 + 0x20, 1 << 40);
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn whole_elf_images_are_recognised() {
        let image = elf(b"kernel bytes");
        assert!(is_whole_elf64(&image));
        // cut short: the section's bytes run past the end
        assert!(!is_whole_elf64(&image[..image.len() - 1]));
        assert!(!is_whole_elf64(&image[..40]));
        assert!(!is_whole_elf64(b""));
        // a section header table declared past the end, or an offset that overflows
        let mut far = image.clone();
        far[0x28..0x30].copy_from_slice(&(image.len() as u64).to_le_bytes());
        assert!(!is_whole_elf64(&far));
        let mut wrap = image.clone();
        let sh = 64 + 56;
        wrap[sh + 0x18..sh + 0x20].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(!is_whole_elf64(&wrap));
        let mut not_elf = image;
        not_elf[1] = b'X';
        assert!(!is_whole_elf64(&not_elf));
    }

    #[test]
    fn cache_files_round_trip_and_reject_damage() {
        let image = elf(b"kernel bytes");
        let file = cache_file(&image);
        assert_eq!(cache_payload(file.clone()), Some(image.clone()));
        // every single-byte change, and every truncation, is caught
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x40;
            assert_eq!(cache_payload(bad), None, "byte {i} flipped");
            assert_eq!(cache_payload(file[..i].to_vec()), None, "cut at {i}");
        }
        // a file of the old format (the bare image) is compiled again, not loaded
        assert_eq!(cache_payload(image), None);
        // a well-formed file around an image that is not a whole ELF file is refused too
        assert_eq!(cache_payload(cache_file(b"not an image")), None);
    }
}
