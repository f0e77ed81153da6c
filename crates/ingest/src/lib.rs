//! Ingestion building blocks: loaders that turn a file into normalized documents, the
//! chunkers that split documents, and the folder walk with include/exclude globs.
//!
//! Nothing here touches a store: the engine drives loaders and chunkers and writes what
//! they produce in atomic batches.

pub mod chunk;
pub mod loaders;
pub mod testdata;
pub mod walk;

pub use chunk::{ChunkSpan, Chunker, SentenceChunker};
pub use loaders::{
    html_to_text, loader_for, loaders, LoadError, LoadReport, LoadedDoc, Loader, LoaderOptions,
    SourceInput,
};
pub use walk::{walk, WalkEntry, WalkOptions};
