// The types of hooks.mjs, for the test that imports it.

/** The suite bundle's source with the scenario registered; throws naming an anchor it cannot find. */
export function withScenarios(source: string): string;
