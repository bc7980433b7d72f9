// The SEP-3182 cases end to end: the real server process, the real SDK client, over stdio.

import { connectToServer } from '../client-demo.js';
import { describeSepCases } from './support/sep-cases.js';

describeSepCases('stdio', connectToServer);
