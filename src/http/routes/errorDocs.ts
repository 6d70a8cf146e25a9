import { errorSchema } from '../schemas.js';

// Error responses that several endpoints document, each written once.

export const invalidDoc = { description: 'a bad field, named in the error', schema: errorSchema };
export const jobNotFoundDoc = { description: 'no such job (or not this token’s tenant’s)', schema: errorSchema };
export const timeoutDoc = { description: 'past the statement timeout of lists and searches', schema: errorSchema };

/** A list or search with filters: a bad filter, or past the statement timeout of lists and searches. */
export const searchDocs = { 400: invalidDoc, 503: timeoutDoc };
