// --- The protocol revisions the guard serves ---

/** The stateless protocol revision the SEP is written for. */
export const MODERN_PROTOCOL_VERSION = '2026-07-28';

/** The last protocol revision with initialize; 2025-era clients still speak it. */
export const LEGACY_PROTOCOL_VERSION = '2025-11-25';
